/* test_ckpt_overwrite.c - a sharded checkpoint is one unit, and an overwrite that dies midway
 * leaves the old one: a save cancelled in its second shard, and a save in a child process
 * killed (SIGKILL) in its third shard, each leave the old checkpoint loadable, whole; the next
 * save that succeeds removes the old checkpoint's shards and the dead save's (stale) ones, so
 * the folder then holds exactly the index and its shards. Before, shards were replaced in
 * place and the old checkpoint was lost (the load failed on the generation check). Local
 * folder always; S3 when a test server is configured. */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "s3direct/object.h"

#include "testutil.h"

#define NT    8
#define ELEMS (256 * 1024) /* 1 MiB of F32 per tensor */
#define SHARD (2u << 20)   /* two tensors per shard: 4 shards */

struct ckpt {
    struct s3d_tensor_src src[NT];
    int64_t shape[NT][1];
    char names[NT][32];
    float *data[NT];
};

static void make(struct ckpt *k, float base)
{
    for (int i = 0; i < NT; i++) {
        snprintf(k->names[i], sizeof(k->names[i]), "layer.%d.weight", i);
        k->shape[i][0] = ELEMS;
        k->data[i] = malloc(ELEMS * sizeof(float));
        CHECK(k->data[i] != NULL);
        for (int j = 0; j < ELEMS; j++)
            k->data[i][j] = base + (float)i;
        k->src[i] = (struct s3d_tensor_src){.name = k->names[i],
                                            .dtype = S3D_DTYPE_F32,
                                            .ndim = 1,
                                            .shape = k->shape[i],
                                            .ptr = k->data[i],
                                            .device = -1,
                                            .nbytes = ELEMS * sizeof(float)};
    }
}

static void unmake(struct ckpt *k)
{
    for (int i = 0; i < NT; i++)
        free(k->data[i]);
}

/* Cancels once the save has passed the first shard and part of the second. */
static int die_in_shard_2(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)total;
    return done > SHARD + SHARD / 2;
}

/* Loads every tensor of uri and checks that each holds base + i throughout. */
static void check_whole(struct s3d_client *c, const char *uri, float base)
{
    struct s3d_reader *r = NULL;
    struct s3d_tensor_dest d[NT];
    float *buf = malloc((size_t)NT * ELEMS * sizeof(float));
    CHECK(buf != NULL);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    CHECK(s3d_reader_num_tensors(r) == NT);
    CHECK(s3d_reader_num_shards(r) == NT * ELEMS * sizeof(float) / SHARD);
    for (int i = 0; i < NT; i++) {
        size_t idx;
        char name[32];
        snprintf(name, sizeof(name), "layer.%d.weight", i);
        CHECK_OK(s3d_reader_find(r, name, &idx));
        d[i] = (struct s3d_tensor_dest){.index = idx,
                                        .ptr = buf + (size_t)i * ELEMS,
                                        .device = -1,
                                        .capacity = ELEMS * sizeof(float)};
    }
    CHECK_OK(s3d_reader_read(r, d, NT, NULL));
    for (int i = 0; i < NT; i++)
        for (int j = 0; j < ELEMS; j += 4099)
            if (buf[(size_t)i * ELEMS + j] != base + (float)i)
                t_fail(__FILE__, __LINE__, "%s: tensor %d holds %g, expected %g", uri, i,
                       buf[(size_t)i * ELEMS + j], base + (float)i);
    s3d_reader_close(r);
    free(buf);
}

/* In the child: dies by SIGKILL once the save is in its third shard (no cleanup runs). */
static int kill_in_shard_3(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)total;
    if (done > 2 * SHARD + SHARD / 2)
        raise(SIGKILL);
    return 0;
}

/* Saves k in a forked child (its own client) that is killed midway. */
static void save_killed(int s3, const char *uri, struct ckpt *k)
{
    int status = 0;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct s3d_client_options o;
        struct s3d_client *c = NULL;
        struct s3d_write_options wo;
        memset(&o, 0, sizeof(o));
        if (s3)
            c = t_s3_client();
        else if (s3d_client_new(&o, &c) < 0)
            _exit(3);
        memset(&wo, 0, sizeof(wo));
        wo.max_shard_size = SHARD;
        wo.progress = kill_in_shard_3;
        if (s3d_checkpoint_write(c, uri, k->src, NT, NULL, 0, &wo) < 0)
            _exit(5);
        _exit(4); /* the save finished: not what this test needs */
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        t_fail(__FILE__, __LINE__, "the saving child was not killed midway (status %d)", status);
}

struct names {
    char v[64][256];
    int n;
};

static int list_entry(void *user, const struct s3d_list_entry *e)
{
    struct names *l = user;
    const char *slash = strrchr(e->key, '/');
    if (l->n < 64)
        snprintf(l->v[l->n++], sizeof(l->v[0]), "%s", slash != NULL ? slash + 1 : e->key);
    return 0;
}

/* The file names beside the index (hidden temporary files aside). */
static void list_names(struct s3d_client *c, const char *uri, struct names *l)
{
    memset(l, 0, sizeof(*l));
    if (strncmp(uri, "s3://", 5) == 0) {
        char bucket[128], key[512];
        CHECK_OK(s3d_uri_parse(uri, bucket, sizeof(bucket), key, sizeof(key)));
        *strrchr(key, '/') = '\0';
        strcat(key, "/");
        CHECK_OK(s3d_list_objects(c, bucket, key, "/", list_entry, l));
    } else {
        char dir[512];
        DIR *d;
        struct dirent *de;
        snprintf(dir, sizeof(dir), "%s", uri);
        *strrchr(dir, '/') = '\0';
        d = opendir(dir);
        CHECK(d != NULL);
        while ((de = readdir(d)) != NULL)
            if (de->d_name[0] != '.' && l->n < 64)
                snprintf(l->v[l->n++], sizeof(l->v[0]), "%s", de->d_name);
        closedir(d);
    }
}

/* Exactly the index and the shards the reader opens from it are beside it. */
static void check_only_current(struct s3d_client *c, const char *uri)
{
    struct names l;
    struct s3d_reader *r = NULL;
    size_t ns;
    list_names(c, uri, &l);
    CHECK_OK(s3d_reader_open(c, uri, &r));
    ns = s3d_reader_num_shards(r);
    if ((size_t)l.n != ns + 1) {
        for (int i = 0; i < l.n; i++)
            fprintf(stderr, "  found %s\n", l.v[i]);
        t_fail(__FILE__, __LINE__, "%s: %d files beside the index's folder, expected %zu", uri, l.n,
               ns + 1);
    }
    for (size_t i = 0; i < ns; i++) {
        const char *su = NULL;
        uint64_t hb = 0, ob = 0;
        int found = 0;
        CHECK_OK(s3d_reader_shard(r, i, &su, &hb, &ob));
        for (int j = 0; j < l.n; j++)
            found |= strcmp(strrchr(su, '/') + 1, l.v[j]) == 0;
        if (!found)
            t_fail(__FILE__, __LINE__, "shard %s not listed", su);
    }
    s3d_reader_close(r);
}

static void run(struct s3d_client *c, const char *uri)
{
    struct ckpt a, b;
    struct s3d_write_options wo;

    make(&a, 100.0f);
    make(&b, 200.0f);
    memset(&wo, 0, sizeof(wo));
    wo.max_shard_size = SHARD;
    CHECK_OK(s3d_checkpoint_write(c, uri, a.src, NT, NULL, 0, &wo));
    check_whole(c, uri, 100.0f);

    check_only_current(c, uri);

    /* A save of b dies in its second shard: the old checkpoint is whole, and the shard b had
     * finished is removed (no index names it). */
    wo.progress = die_in_shard_2;
    CHECK_ERR(s3d_checkpoint_write(c, uri, b.src, NT, NULL, 0, &wo), S3D_ECANCELED);
    check_whole(c, uri, 100.0f);
    check_only_current(c, uri);

    /* A save of b killed in its third shard leaves the shards it finished (two in a folder,
     * where progress moves by the write; in S3, where shards go up together and progress
     * moves by the shard, up to all four: killed before its index); a is still the
     * checkpoint, whole. */
    save_killed(strncmp(uri, "s3://", 5) == 0, uri, &b);
    check_whole(c, uri, 100.0f);
    {
        struct names l;
        list_names(c, uri, &l);
        /* a's shards, the index, and the dead save's */
        if (l.n < 4 + 1 + 1 || l.n > 4 + 1 + 4)
            t_fail(__FILE__, __LINE__, "%d files after the killed save", l.n);
    }

    /* The next whole save replaces it, then removes a's shards and (stale at age 0) the dead
     * save's. */
    wo.progress = NULL;
    CHECK(setenv("S3D_STALE_SHARD_AGE", "0", 1) == 0);
    CHECK_OK(s3d_checkpoint_write(c, uri, b.src, NT, NULL, 0, &wo));
    CHECK(unsetenv("S3D_STALE_SHARD_AGE") == 0);
    check_whole(c, uri, 200.0f);
    check_only_current(c, uri);
    unmake(&a);
    unmake(&b);
}

int main(void)
{
    struct s3d_client_options o;
    struct s3d_client *c = NULL;
    char uri[512];
    const char *ep = getenv("AWS_ENDPOINT_URL");

    memset(&o, 0, sizeof(o));
    CHECK_OK(s3d_client_new(&o, &c));
    snprintf(uri, sizeof(uri), "%s/ow", t_tmpdir());
    CHECK(mkdir(uri, 0777) == 0);
    snprintf(uri, sizeof(uri), "%s/ow/model.safetensors.index.json", t_tmpdir());
    run(c, uri);
    s3d_client_free(c);

    if (ep != NULL && *ep != '\0') {
        char bucket[128];
        c = t_s3_client();
        t_s3_bucket(c, "overwrite", bucket, sizeof(bucket));
        snprintf(uri, sizeof(uri), "s3://%s/ckpt/model.safetensors.index.json", bucket);
        run(c, uri);
        s3d_client_free(c);
    } else {
        printf("S3 part skipped: AWS_ENDPOINT_URL unset\n");
    }
    printf("ok\n");
    return 0;
}
