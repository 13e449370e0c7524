"""Validates a `convert --attest` statement with the in-toto attestation reference library
(in-toto-attestation 0.9.3, pinned in .ci/requirements.txt): the JSON must parse strictly into
its Statement v1 protobuf (unknown fields refused), pass Statement.validate(), and every
material must pass ResourceDescriptor.validate(). Also recomputes model-signing v1.0's root
digest (sha256 over the raw subject digests in name order) and the subjects' sha256 of the
files in DIR with hashlib.

usage: intoto_check.py STATEMENT.json DIR
"""
import hashlib
import json
import os
import sys

import google.protobuf.json_format as pb_json
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

path, root = sys.argv[1:3]
text = open(path).read()
pb = pb_json.Parse(text, statement_pb2.Statement())
st = Statement.copy_from_pb(pb)
st.validate()
doc = json.loads(text)
for m in doc["predicate"]["materials"]:
    ResourceDescriptor(name=m["name"], digest=m["digest"]).validate()
    assert set(m["digest"]) == {"sha256"}, m
names = [s["name"] for s in doc["subject"]]
assert names == sorted(names), "subjects are not sorted by name"
h = hashlib.sha256()
for s in doc["subject"]:
    with open(os.path.join(root, s["name"]), "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    assert got == s["digest"]["sha256"], (s["name"], got)
    h.update(bytes.fromhex(s["digest"]["sha256"]))
ms = doc["predicate"]["modelSigning"]["digest"]["sha256"]
assert ms == h.hexdigest(), (ms, h.hexdigest())
print(f"valid in-toto Statement v1: {len(pb.subject)} subjects, predicate {pb.predicate_type}")
