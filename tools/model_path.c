/* model_path.c - the checkpoint that info and verify open: a file, an object, an index, or a
 * model folder, resolved as Python's load() resolves it (python/s3direct/_uri.py):
 *
 *   s3://b/model/ or a local folder   its model.safetensors, else its
 *                                     model.safetensors.index.json, else an error
 *   s3://b/model (no such object)     the same, in the folder s3://b/model/, when it is one
 *   anything else                     opened as it is
 *
 * Only the two names Hugging Face writes are looked for, as load() looks for them, so that
 * what info and verify accept is what load() accepts; when neither is there, the error names
 * the safetensors files and indexes the folder holds instead. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char *const model_names[] = {"model.safetensors", "model.safetensors.index.json"};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_model_file(const char *name)
{
    return ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json");
}

/* Up to 3 names of model files in a folder, for the error ("a.safetensors, b.safetensors,
 * ..."). */
struct seen {
    char text[512];
    size_t n;     /* model files */
    size_t any;   /* entries of any kind */
    size_t strip; /* bytes of each key not shown (the folder's prefix) */
};

static void seen_add(struct seen *s, const char *name)
{
    size_t len = strlen(s->text);

    if (!is_model_file(name) || strchr(name, '/') != NULL)
        return;
    if (s->n < 3)
        snprintf(s->text + len, sizeof(s->text) - len, "%s%s", s->n ? ", " : "", name);
    else if (s->n == 3)
        snprintf(s->text + len, sizeof(s->text) - len, ", ...");
    s->n++;
}

static int seen_cb(void *user, const struct s3d_list_entry *e)
{
    struct seen *s = user;

    s->any++;
    if (!e->is_prefix && strlen(e->key) > s->strip)
        seen_add(s, e->key + s->strip);
    return 0;
}

/* What the folder holds, for the error; "" when nothing of use (or it cannot be listed). */
static void folder_models(struct s3d_client *c, const char *folder, struct seen *s)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP];

    memset(s, 0, sizeof(*s));
    if (cli_is_s3(folder)) {
        if (s3d_uri_parse(folder, bucket, sizeof(bucket), key, sizeof(key)) == 0) {
            s->strip = strlen(key);
            s3d_list_objects(c, bucket, key, "/", seen_cb, s);
        }
    } else {
        DIR *d = opendir(folder);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL)
            seen_add(s, e->d_name);
        if (d != NULL)
            closedir(d);
    }
}

/* Whether uri names an object or a regular file: 1 yes, 0 no, or the exit status after
 * printing the error (a HEAD that failed otherwise than with 404) as a negative number. */
static int exists(struct s3d_client *c, const char *uri)
{
    char bucket[CLI_BUCKET_CAP], key[CLI_KEY_CAP];
    struct s3d_object_info info;
    struct stat st;
    int rc;

    if (!cli_is_s3(uri))
        return stat(uri, &st) == 0 && S_ISREG(st.st_mode);
    if (cli_split_uri(uri, bucket, key) < 0)
        return -CLI_EXIT_FAIL;
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    rc = s3d_head_object(c, bucket, key, &info);
    if (rc == S3D_ENOSUCHKEY)
        return 0;
    return rc < 0 ? -cli_fail(rc) : 1;
}

/* The model file in folder (ending in '/' for S3) into uri: 0 found, 1 not there, or the
 * exit status after printing the error (a negative number). */
static int model_in(struct s3d_client *c, const char *folder, char *uri, size_t cap)
{
    size_t i;
    int rc, n;

    for (i = 0; i < sizeof(model_names) / sizeof(model_names[0]); i++) {
        n = snprintf(uri, cap, "%s%s%s", folder,
                     cli_is_s3(folder) || cli_ends_with_slash(folder) ? "" : "/", model_names[i]);
        if (n < 0 || (size_t)n >= cap)
            return -cli_error("path too long: %s%s", folder, model_names[i]);
        if ((rc = exists(c, uri)) != 0)
            return rc > 0 ? 0 : rc;
    }
    return 1;
}

int cli_reader_open(struct s3d_client *c, const char *arg, char *uri, size_t cap,
                    struct s3d_reader **out)
{
    char folder[CLI_BUCKET_CAP + CLI_KEY_CAP + 8], first_error[1024];
    struct seen s;
    struct stat st;
    int rc, found;

    *out = NULL;
    if (strlen(arg) + 1 > cap || strlen(arg) + 2 > sizeof(folder))
        return cli_error("path too long: %s", arg);
    snprintf(uri, cap, "%s", arg);
    if (cli_is_s3(arg) ? cli_ends_with_slash(arg) : stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(folder, sizeof(folder), "%s", arg);
        if ((found = model_in(c, folder, uri, cap)) < 0)
            return -found;
        if (found > 0) {
            folder_models(c, folder, &s);
            return cli_error("%s: the folder has neither %s nor %s%s%s%s", arg, model_names[0],
                             model_names[1], s.n ? "; it holds " : "", s.text,
                             s.n ? ": name one of them" : "");
        }
    }
    rc = s3d_reader_open(c, uri, out);
    if (rc != S3D_ENOSUCHKEY || !cli_is_s3(arg) || cli_ends_with_slash(arg))
        return rc < 0 ? cli_fail(rc) : 0;
    /* s3://b/model where model/ is a folder: the model in it, as load() reads it. */
    snprintf(first_error, sizeof(first_error), "%s", s3d_last_error_message());
    snprintf(folder, sizeof(folder), "%s/", arg);
    if ((found = model_in(c, folder, uri, cap)) < 0)
        return -found;
    if (found == 0) {
        rc = s3d_reader_open(c, uri, out);
        return rc < 0 ? cli_fail(rc) : 0;
    }
    folder_models(c, folder, &s);
    if (s.any > 0)
        return cli_error(
            "%s: no such object, but %s is a folder, and it has neither %s nor %s%s%s%s", arg,
            folder, model_names[0], model_names[1], s.n ? "; it holds " : "", s.text,
            s.n ? ": name one of them" : "");
    return cli_error("%s", first_error);
}
