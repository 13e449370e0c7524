#!/usr/bin/env python3
"""A Hugging Face Hub layout served by nginx: the tree and the config, for the remote tests
(tests/it/common/hub.rs) and the remote benchmark (benches/remote.sh). Standard library and the
openssl command only.

    hub_tree.py DIR --port P --plain-port Q [--lfs-port L] [--token T] [--link] [--rate R]
                [--wrong-sha NAME/FILE] NAME=SRC_DIR ...

Writes, under DIR: a CA and a certificate for 127.0.0.1 and 127.0.0.2 (ca.pem, cert.pem,
key.pem); root/lfs/<sha256> (each file copied, or hard-linked with --link); root/api/models/org/
NAME/revision/{main,COMMIT} (the model API's answer: `sha`, `siblings` with sizes and LFS
sha256); and nginx.conf: HTTPS on 127.0.0.1:P and 127.0.0.2:P, plain http on 127.0.0.1:Q;
`/org/NAME/resolve/{main,COMMIT}/FILE` answering 302 to https://127.0.0.2:L/lfs/<sha256> for
LFS files (weights; `X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`) and the file itself for
small ones; the API and /resolve/ answer 401 without `Authorization: Bearer T`, /lfs/ answers
403 *with* any; /plain/ and /norange/ (`max_ranges 0`) serve files put there. COMMIT is the
first 40 hex digits of sha256(NAME). --rate: nginx `limit_rate` on /lfs/ (e.g. 100m, per
connection). --wrong-sha NAME/FILE: the listing gives that file a wrong LFS sha256.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

LFS = (".safetensors", ".bin", ".gguf", ".npz", ".npy", ".model")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def commit_of(name):
    return hashlib.sha256(name.encode()).hexdigest()[:40]


def certificates(d):
    def o(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    o("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
      "-subj", "/CN=weightport test CA",
      "-addext", "basicConstraints=critical,CA:TRUE",
      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    o("req", *ec, "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:127.0.0.2\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    o("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
      "-CAcreateserial", "-out", "cert.pem", "-days", "2", "-extfile", "leaf.ext")


def lay_out(name, src, root, lfs_port, token, link, wrong):
    """The nginx locations of repo org/NAME (the files of SRC), its listing and LFS objects."""
    commit = commit_of(name)
    auth = f'if ($http_authorization != "Bearer {token}") {{ return 401; }}'
    conf, siblings = [], []
    for fname in sorted(os.listdir(src)):
        path = os.path.join(src, fname)
        if not os.path.isfile(path):
            continue
        size, sha = os.path.getsize(path), sha256_file(path)
        dst = os.path.join(root, "lfs", sha)
        if not os.path.exists(dst):
            if link:
                os.link(path, dst)
            else:
                shutil.copyfile(path, dst)
        lfs = fname.endswith(LFS)
        listed = "0" * 64 if f"{name}/{fname}" in wrong else sha
        sib = {"rfilename": fname, "size": size}
        if lfs:
            sib["lfs"] = {"sha256": listed, "size": size}
        siblings.append(sib)
        for rev in ("main", commit):
            if lfs:
                answer = (f"add_header X-Linked-Etag '\"{sha}\"' always; "
                          f"add_header X-Linked-Size {size} always;\n"
                          f"return 302 https://127.0.0.2:{lfs_port}/lfs/{sha};")
            else:
                answer = f"alias {root}/lfs/{sha};"
            conf.append(f"location = /org/{name}/resolve/{rev}/{fname} {{ {auth}\n"
                        f"add_header X-Repo-Commit {commit} always; {answer} }}\n")
    listing = json.dumps({"id": f"org/{name}", "sha": commit, "siblings": siblings},
                         separators=(",", ":"))
    api = os.path.join(root, "api/models/org", name, "revision")
    os.makedirs(api, exist_ok=True)
    for rev in ("main", commit):
        with open(os.path.join(api, rev), "w") as f:
            f.write(listing)
    return "".join(conf)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--plain-port", type=int, required=True)
    p.add_argument("--lfs-port", type=int)
    p.add_argument("--token", default="hf_testtoken_0123456789abcdef")
    p.add_argument("--link", action="store_true")
    p.add_argument("--rate", default="")
    p.add_argument("--wrong-sha", action="append", default=[])
    p.add_argument("repos", nargs="*", metavar="NAME=SRC_DIR")
    a = p.parse_intermixed_args()
    d = os.path.abspath(a.dir)
    root = os.path.join(d, "root")
    for sub in ("lfs", "plain", "norange", "tmp"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    certificates(d)
    files = ""
    for r in a.repos:
        name, _, src = r.partition("=")
        if not name or not src:
            sys.exit(f"hub_tree.py: expected NAME=SRC_DIR, got {r!r}")
        files += lay_out(name, src, root, a.lfs_port or a.port, a.token, a.link, a.wrong_sha)
    user = "user root;" if os.getuid() == 0 else ""
    rate = f"limit_rate {a.rate};" if a.rate else ""
    t = a.token
    conf = f"""{user}
worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{
log_format c '$request_method $uri $status "$http_range" $body_bytes_sent';
access_log {d}/access.log c;
client_body_temp_path {d}/root/tmp;
default_type application/octet-stream;
server {{
listen 127.0.0.1:{a.port} ssl; listen 127.0.0.2:{a.port} ssl; listen 127.0.0.1:{a.plain_port};
ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
location /api/models/ {{ if ($http_authorization != "Bearer {t}") {{ return 401; }}
  alias {d}/root/api/models/; default_type application/json; }}
location /lfs/ {{ if ($http_authorization) {{ return 403; }} root {d}/root; {rate} }}
location /plain/ {{ root {d}/root; }}
location /norange/ {{ max_ranges 0; root {d}/root; }}
{files}}}
}}
"""
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(conf)


if __name__ == "__main__":
    main()
