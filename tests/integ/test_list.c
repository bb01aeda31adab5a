/* test_list.c - ListObjectsV2 over more than one page (1,000 keys per page on S3 and RGW),
 * with and without a delimiter, early stop; DeleteObjects over more than 1,000 keys. The keys
 * are created with parallel PUTs from several threads sharing one client. ListBuckets: the
 * test's bucket is listed with its creation time; early stop. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define NKEYS    1012
#define NTHREADS 8

static struct s3d_client *client;
static char bucket[128];
static char keys[NKEYS][64];

static void *putter(void *arg)
{
    long t = (long)arg;
    int i;
    for (i = (int)t; i < NKEYS; i += NTHREADS) {
        int rc = s3d_upload_from_buffer(client, bucket, keys[i], keys[i], strlen(keys[i]), NULL);
        if (rc != 0)
            t_fail(__FILE__, __LINE__, "PUT %s: %s", keys[i], s3d_last_error_message());
    }
    return NULL;
}

struct seen {
    int objects, prefixes, stop_after;
    char last[64];
    int out_of_order;
    int bad_size;
    int pages, page_end[4]; /* entries marked page_last: how many, and their positions */
    int last_was_prefix;    /* the page_last entry was a common prefix */
};

static int on_entry(void *user, const struct s3d_list_entry *e)
{
    struct seen *s = user;
    if (e->is_prefix) {
        s->prefixes++;
        CHECK(e->size == 0);
    } else {
        if (strcmp(e->key, s->last) <= 0)
            s->out_of_order = 1;
        snprintf(s->last, sizeof(s->last), "%s", e->key);
        if (e->size != strlen(e->key))
            s->bad_size = 1;
        s->objects++;
    }
    CHECK(e->struct_size >= offsetof(struct s3d_list_entry, page_last) + sizeof(e->page_last));
    if (e->page_last) {
        if (s->pages < 4)
            s->page_end[s->pages] = s->objects + s->prefixes;
        s->pages++;
        s->last_was_prefix = e->is_prefix;
    }
    return s->stop_after > 0 && s->objects + s->prefixes >= s->stop_after;
}

struct buckets_seen {
    int n, found, stop_after;
    int64_t created;
};

static int on_bucket(void *user, const struct s3d_bucket_entry *e)
{
    struct buckets_seen *b = user;
    CHECK(e->name != NULL && e->name[0] != '\0');
    if (strcmp(e->name, bucket) == 0) {
        b->found = 1;
        b->created = e->creation_date;
    }
    b->n++;
    return b->stop_after > 0 && b->n >= b->stop_after;
}

int main(void)
{
    struct buckets_seen bs;
    pthread_t th[NTHREADS];
    const char *ptrs[NKEYS];
    struct seen s;
    long t;
    int i;

    client = t_s3_client();
    t_s3_bucket(client, "list", bucket, sizeof(bucket));
    /* 1,000 keys in 10 "folders" plus 12 at the top. */
    for (i = 0; i < NKEYS; i++) {
        if (i < 1000)
            snprintf(keys[i], sizeof(keys[i]), "dir%02d/key-%05d", i % 10, i);
        else
            snprintf(keys[i], sizeof(keys[i]), "top-%d", i);
        ptrs[i] = keys[i];
    }
    for (t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, putter, (void *)t) == 0);
    for (t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);

    /* Recursive: every key once, in order, over two pages. */
    memset(&s, 0, sizeof(s));
    CHECK_OK(s3d_list_objects(client, bucket, NULL, NULL, on_entry, &s));
    CHECK(s.objects == NKEYS);
    CHECK(s.prefixes == 0);
    CHECK(!s.out_of_order);
    CHECK(!s.bad_size);
    /* page_last ends each page: at most 1,000 keys each (RGW may send fewer: 976 seen), the
     * last one ending with the last key. */
    CHECK(s.pages >= 2 && s.pages <= 4 && s.page_end[0] <= 1000 && s.page_end[1] > s.page_end[0]);
    CHECK(s.page_end[s.pages - 1] == NKEYS);

    /* With a delimiter: 10 common prefixes and the 12 top-level keys. */
    memset(&s, 0, sizeof(s));
    CHECK_OK(s3d_list_objects(client, bucket, NULL, "/", on_entry, &s));
    CHECK(s.prefixes == 10);
    CHECK(s.objects == 12);
    /* One page: its objects, then its prefixes; the last prefix ends it. */
    CHECK(s.pages == 1 && s.page_end[0] == 22 && s.last_was_prefix);

    /* Prefix: one folder (100 keys); prefix + delimiter inside it. */
    memset(&s, 0, sizeof(s));
    CHECK_OK(s3d_list_objects(client, bucket, "dir03/", NULL, on_entry, &s));
    CHECK(s.objects == 100);
    memset(&s, 0, sizeof(s));
    CHECK_OK(s3d_list_objects(client, bucket, "dir03/", "/", on_entry, &s));
    CHECK(s.objects == 100 && s.prefixes == 0);

    /* Early stop past the first page. */
    memset(&s, 0, sizeof(s));
    s.stop_after = 1005;
    CHECK_OK(s3d_list_objects(client, bucket, NULL, NULL, on_entry, &s));
    CHECK(s.objects == 1005);

    /* ListBuckets: this bucket, created a moment ago; stopping after one entry. */
    memset(&bs, 0, sizeof(bs));
    CHECK_OK(s3d_list_buckets(client, on_bucket, &bs));
    CHECK(bs.found);
    CHECK(bs.created > (int64_t)time(NULL) - 3600 && bs.created < (int64_t)time(NULL) + 3600);
    memset(&bs, 0, sizeof(bs));
    bs.stop_after = 1;
    CHECK_OK(s3d_list_buckets(client, on_bucket, &bs));
    CHECK(bs.n == 1);
    CHECK(s3d_list_buckets(client, NULL, NULL) == S3D_EINVAL);

    /* DeleteObjects: 1,012 keys in two requests; the bucket is then empty. */
    CHECK_OK(s3d_delete_objects(client, bucket, ptrs, NKEYS));
    memset(&s, 0, sizeof(s));
    CHECK_OK(s3d_list_objects(client, bucket, NULL, NULL, on_entry, &s));
    CHECK(s.objects == 0);
    CHECK_OK(s3d_delete_bucket(client, bucket));
    s3d_client_free(client);
    return 0;
}
