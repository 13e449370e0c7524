/* Which bytes torch.load unpickles from a ZIP: miniz driven in the order torch's
 * PyTorchStreamReader drives it (caffe2/serialize/inline_container.cc: init, the archive name
 * from entry 0, getRecord("data.pkl")), with nothing else in between. Original code of the
 * weightport project; miniz is linked, not copied.
 *
 * Returns 0 and sets *out (malloc'd; the caller frees it with wp_oracle_free) and *out_len
 * when torch would read data.pkl; otherwise a non-zero step number and a message in err. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "miniz.h"

/* Larger records are not read (torch would allocate them; no test input comes near). */
#define WP_MAX_RECORD (256u << 20)

static int fail(mz_zip_archive *ar, char *err, size_t errlen, int step, const char *what)
{
    snprintf(err, errlen, "%s: %s", what, mz_zip_get_error_string(mz_zip_get_last_error(ar)));
    mz_zip_reader_end(ar);
    return step;
}

int wp_oracle_torch_data_pkl(const unsigned char *buf, size_t len, unsigned char **out,
                             size_t *out_len, char *err, size_t errlen)
{
    mz_zip_archive ar;
    memset(&ar, 0, sizeof ar);
    *out = NULL;
    *out_len = 0;
    /* PyTorchStreamReader::init: mz_zip_reader_init(ar, size, 0) over its read callback. */
    if (!mz_zip_reader_init_mem(&ar, buf, len, 0))
        return fail(&ar, err, errlen, 1, "reading zip archive");
    if (mz_zip_reader_get_num_files(&ar) == 0)
        return fail(&ar, err, errlen, 2, "archive does not contain any files");
    /* The archive name: entry 0's name up to its first '/'. The std::string torch builds keeps
     * embedded NULs; its c_str() given to miniz ends at the first one, as here. */
    mz_uint name_size = mz_zip_reader_get_filename(&ar, 0, NULL, 0);
    char *name = calloc(name_size + 1, 1);
    if (!name)
        return fail(&ar, err, errlen, 3, "out of memory");
    mz_zip_reader_get_filename(&ar, 0, name, name_size);
    char *slash = memchr(name, '/', name_size);
    if (!slash) {
        free(name);
        return fail(&ar, err, errlen, 4, "file in archive is not in a subdirectory");
    }
    size_t prefix = (size_t)(slash - name) + 1;
    const char leaf[] = "data.pkl";
    char *key = calloc(prefix + sizeof leaf, 1);
    if (!key) {
        free(name);
        return fail(&ar, err, errlen, 3, "out of memory");
    }
    memcpy(key, name, prefix);
    memcpy(key + prefix, leaf, sizeof leaf);
    free(name);
    /* getRecordID: mz_zip_reader_locate_file(ar, name, nullptr, 0), then valid(). */
    int index = mz_zip_reader_locate_file(&ar, key, NULL, 0);
    free(key);
    if (index < 0)
        return fail(&ar, err, errlen, 5, "locating file data.pkl");
    mz_zip_archive_file_stat stat;
    if (!mz_zip_reader_file_stat(&ar, (mz_uint)index, &stat))
        return fail(&ar, err, errlen, 6, "retrieving file meta-data for data.pkl");
    if (stat.m_uncomp_size > WP_MAX_RECORD) {
        snprintf(err, errlen, "data.pkl declares %llu bytes, over the oracle's cap",
                 (unsigned long long)stat.m_uncomp_size);
        mz_zip_reader_end(&ar);
        return 7;
    }
    size_t size = (size_t)stat.m_uncomp_size;
    unsigned char *data = malloc(size ? size : 1);
    if (!data)
        return fail(&ar, err, errlen, 3, "out of memory");
    if (!mz_zip_reader_extract_to_mem(&ar, (mz_uint)index, data, size, 0)) {
        free(data);
        return fail(&ar, err, errlen, 8, "reading file data.pkl");
    }
    mz_zip_reader_end(&ar);
    *out = data;
    *out_len = size;
    return 0;
}

void wp_oracle_free(unsigned char *p)
{
    free(p);
}
