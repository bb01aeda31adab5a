/* test_pool_numa.c - the staging pool placed on its GPU's NUMA node (issue 39), against the
 * stand-in libcuda of fake_cuda.c (found first through this executable's run path) and a sysfs
 * tree of the test's own (S3D_TEST_SYSFS_ROOT). The fake names device 0 "0000:3B:00.0" and
 * device 1 "00000000:86:00.0"; the tree says node 0 (this machine's one node) for the first,
 * -1, nothing, or a node that does not exist for the second.
 *
 * A pool pinned for device 0 must show a "prefer:0" memory policy over each of its blocks in
 * /proc/self/numa_maps, set before cuMemHostRegister faulted the pages in (the fake keeps the
 * policy each range had then), also when the pages were touched before (host-only use first,
 * then a GPU save through a client); a pool pinned for device 1 keeps the default policy, and
 * the pin succeeds whatever the lookup or mbind says. What one node cannot show: pages going
 * to, or moving to, another node. Skipped when a real driver is found first, or where the
 * kernel (no NUMA), a seccomp filter or qemu-user (make test-aarch64) refuses mbind. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/compiler.h"
#include "device/device.h"
#include "engine/pool.h"
#include "engine/resources.h"
#include "testutil.h"

static int (*register_modes)(int *out, int cap);

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[8192]; /* the lines that mention NUMA, one per line */

static void on_log(void *user, int level, const char *line, size_t len)
{
    (void)user;
    (void)level;
    if (strstr(line, "NUMA") == NULL)
        return;
    pthread_mutex_lock(&g_log_mu);
    size_t have = strlen(g_log);
    snprintf(g_log + have, sizeof(g_log) - have, "%.*s\n", (int)len, line);
    pthread_mutex_unlock(&g_log_mu);
}

static int log_has(const char *needle)
{
    pthread_mutex_lock(&g_log_mu);
    int yes = strstr(g_log, needle) != NULL;
    pthread_mutex_unlock(&g_log_mu);
    return yes;
}

static void log_clear(void)
{
    pthread_mutex_lock(&g_log_mu);
    g_log[0] = '\0';
    pthread_mutex_unlock(&g_log_mu);
}

/* Writes text into <tmp>/sys/bus/pci/devices/<dev>/numa_node; text NULL removes the file. */
static void set_numa_node(const char *dev, const char *text)
{
    char path[700];
    snprintf(path, sizeof(path), "%s/sys", t_tmpdir());
    mkdir(path, 0755);
    strcat(path, "/bus");
    mkdir(path, 0755);
    strcat(path, "/pci");
    mkdir(path, 0755);
    strcat(path, "/devices");
    mkdir(path, 0755);
    snprintf(path + strlen(path), sizeof(path) - strlen(path), "/%s", dev);
    mkdir(path, 0755);
    strcat(path, "/numa_node");
    if (text == NULL) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Removes the tree set_numa_node made, and t_tmpdir() when it is empty. */
static void remove_tree(void)
{
    static const char *const dirs[] = {"/sys/bus/pci/devices/0000:3b:00.0",
                                       "/sys/bus/pci/devices/0000:86:00.0",
                                       "/sys/bus/pci/devices",
                                       "/sys/bus/pci",
                                       "/sys/bus",
                                       "/sys",
                                       ""};
    char path[700];
    for (size_t i = 0; i < S3D_ARRAY_LEN(dirs); i++) {
        snprintf(path, sizeof(path), "%s%s/numa_node", t_tmpdir(), dirs[i]);
        unlink(path);
        snprintf(path, sizeof(path), "%s%s", t_tmpdir(), dirs[i]);
        rmdir(path);
    }
}

/* The policy numa_maps shows for the one mapping that holds [p, p + n) whole ("default",
 * "prefer:0", ...), or "" when no one mapping holds it (part of it has another policy). */
static void policy_of(const void *p, size_t n, char *out, size_t cap)
{
    const uintptr_t a = (uintptr_t)p;
    unsigned long lo, hi, start = 0;
    char line[1024];
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    out[0] = '\0';
    while (!found && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) {
            found = a + n <= hi;
            start = lo;
        }
    fclose(f);
    if (!found)
        return;
    f = fopen("/proc/self/numa_maps", "r");
    CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        char pol[64];
        if (sscanf(line, "%lx %63s", &lo, pol) == 2 && lo == start) {
            snprintf(out, cap, "%s", pol);
            break;
        }
    }
    fclose(f);
}

#define CHECK_POLICY(p, n, want)                                                                   \
    do {                                                                                           \
        char t_pol_[64];                                                                           \
        policy_of((p), (n), t_pol_, sizeof(t_pol_));                                               \
        if (strcmp(t_pol_, (want)) != 0)                                                           \
            t_fail(__FILE__, __LINE__, "policy of %p (+%zu): \"%s\", expected \"%s\"",             \
                   (const void *)(p), (size_t)(n), t_pol_, (want));                                \
    } while (0)

/* The registrations the fake saw since *seen: each had policy mode want (1: preferred, 0:
 * default) when it was pinned, and there was at least one. */
static void check_registered(int *seen, int want)
{
    int modes[64];
    int n = register_modes(modes, 64);
    CHECK(n > *seen && n <= 64);
    for (int i = *seen; i < n; i++)
        if (modes[i] != want)
            t_fail(__FILE__, __LINE__, "registration %d pinned with policy %d, expected %d", i,
                   modes[i], want);
    *seen = n;
}

/* Where the lookup finds a node, and why not. */
static void lookups(struct s3d_device *dev)
{
    struct s3d_device *emu;
    char why[512];
    CHECK(s3d_device_numa_node(dev, 0, why, sizeof(why)) == 0);
    set_numa_node("0000:86:00.0", "-1\n");
    CHECK(s3d_device_numa_node(dev, 1, why, sizeof(why)) == -1);
    CHECK(strstr(why, "/sys/bus/pci/devices/0000:86:00.0/numa_node says -1") != NULL);
    set_numa_node("0000:86:00.0", "0\n"); /* the 8-digit domain, lower case: the kernel's name */
    CHECK(s3d_device_numa_node(dev, 1, why, sizeof(why)) == 0);
    set_numa_node("0000:86:00.0", NULL);
    CHECK(s3d_device_numa_node(dev, 1, why, sizeof(why)) == -1);
    CHECK(strstr(why, "numa_node: No such file or directory") != NULL);
    set_numa_node("0000:86:00.0", "x\n");
    CHECK(s3d_device_numa_node(dev, 1, why, sizeof(why)) == -1 && strstr(why, "not a number"));
    setenv("FAKE_CUDA_FAIL_BUSID", "1", 1);
    CHECK(s3d_device_numa_node(dev, 0, why, sizeof(why)) == -1);
    CHECK(strstr(why, "cuDeviceGetPCIBusId: ") != NULL);
    unsetenv("FAKE_CUDA_FAIL_BUSID");
    CHECK(s3d_device_numa_node(dev, 2, why, sizeof(why)) == -1);
    CHECK_OK(s3d_device_open(S3D_DEVICE_EMULATE, &emu));
    CHECK(s3d_device_numa_node(emu, 0, why, sizeof(why)) == -1);
    CHECK(strstr(why, "the emulated backend has no PCI bus") != NULL);
    s3d_device_free(emu);
}

/* Pools pinned for device 0 (node 0) and device 1 (no node, or a node mbind refuses). */
static void pools(struct s3d_device *dev, int *seen)
{
    /* 33 MiB chunks: one per block (64 MiB at most), so two blocks, each to be placed. */
    const size_t cs = 33u << 20;
    struct s3d_pool *p;
    void *c[2];

    CHECK_OK(s3d_pool_new(NULL, 2 * cs, cs, &p));
    CHECK(s3d_pool_get_n(p, 2, c, 0, NULL) == 0);
    CHECK_POLICY(c[0], cs, "default");
    memset(c[1], 0x5a, 4096); /* touched before the GPU is known: moved (MPOL_MF_MOVE) */
    log_clear();
    CHECK_OK(s3d_pool_pin(p, dev, 0));
    CHECK_POLICY(c[0], cs, "prefer:0");
    CHECK_POLICY(c[1], cs, "prefer:0");
    check_registered(seen, 1); /* placed before pinning faulted the pages in */
    CHECK(((unsigned char *)c[1])[4095] == 0x5a);
    CHECK(log_has("staging pool: 2 x 34603008 bytes prefer NUMA node 0, cuda:0's"));
    s3d_pool_put(p, c[0]);
    s3d_pool_put(p, c[1]);
    s3d_pool_free(p);

    /* No node for device 1 (-1, then no file): nothing placed, pinned all the same. */
    static const char *const none[] = {"-1\n", NULL};
    for (size_t i = 0; i < S3D_ARRAY_LEN(none); i++) {
        set_numa_node("0000:86:00.0", none[i]);
        CHECK_OK(s3d_pool_new(NULL, 2 * 4096, 4096, &p));
        log_clear();
        CHECK_OK(s3d_pool_pin(p, dev, 1));
        CHECK(s3d_pool_is_pinned(p));
        c[0] = s3d_pool_try_get(p);
        CHECK_POLICY(c[0], 2 * 4096, "default");
        check_registered(seen, 0);
        CHECK(log_has("staging pool: no NUMA node for cuda:1: "));
        s3d_pool_put(p, c[0]);
        s3d_pool_free(p);
    }

    /* A node this machine lacks: mbind refuses, the pin goes on. */
    set_numa_node("0000:86:00.0", "1000\n");
    CHECK_OK(s3d_pool_new(NULL, 2 * 4096, 4096, &p));
    log_clear();
    CHECK_OK(s3d_pool_pin(p, dev, 1));
    c[0] = s3d_pool_try_get(p);
    CHECK_POLICY(c[0], 2 * 4096, "default");
    check_registered(seen, 0);
    CHECK(log_has("staging pool: not placed on NUMA node 1000 (cuda:1): mbind(MPOL_PREFERRED, "
                  "node 1000): "));
    s3d_pool_put(p, c[0]);
    s3d_pool_free(p);
}

/* A client's pool: first used by host-only work (plain, touched), then pinned by a save of a
 * tensor on device 0 through the client: placed on node 0 before the pin. */
static void client_pool(struct s3d_device *dev, int *seen)
{
    int64_t shp[1] = {1u << 20};
    struct s3d_client_options co;
    struct s3d_client *cl = NULL;
    struct s3d_pool *pool = NULL, *again = NULL;
    struct s3d_write_options wo = {.file_io = S3D_FILE_IO_BUFFERED};
    uint64_t d0;
    void *ch;
    char path[600];

    memset(&co, 0, sizeof(co));
    co.staging_bytes = 4u << 20;
    co.part_size = 1u << 20;
    CHECK_OK(s3d_client_new(&co, &cl));
    CHECK_OK(s3d_client_pool(cl, -1, &pool));
    CHECK(!s3d_pool_is_pinned(pool));
    ch = s3d_pool_try_get(pool);
    memset(ch, 0x11, s3d_pool_chunk_size(pool));
    s3d_pool_put(pool, ch);
    CHECK_POLICY(ch, 4u << 20, "default");

    CHECK_OK(s3d_device_mem_alloc(dev, 0, 1u << 20, &d0));
    t_fill_random((void *)(uintptr_t)d0, 1u << 20, 7);
    struct s3d_tensor_src ts = {.name = "w",
                                .dtype = S3D_DTYPE_U8,
                                .ndim = 1,
                                .shape = shp,
                                .ptr = (const void *)(uintptr_t)d0,
                                .device = 0,
                                .nbytes = 1u << 20};
    snprintf(path, sizeof(path), "%s/numa.safetensors", t_tmpdir());
    log_clear();
    CHECK_OK(s3d_checkpoint_write(cl, path, &ts, 1, NULL, 0, &wo));
    CHECK_OK(s3d_client_pool(cl, 0, &again));
    CHECK(again == pool && s3d_pool_is_pinned(pool));
    CHECK_POLICY(ch, 4u << 20, "prefer:0");
    check_registered(seen, 1);
    CHECK(log_has("prefer NUMA node 0, cuda:0's"));
    s3d_client_free(cl);
    s3d_device_mem_free(dev, 0, d0);
    unlink(path);
}

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    struct s3d_device *dev;
    char root[600];
    int seen = 0;

    if (lib == NULL)
        t_skip("the fake libcuda.so.1 does not load: %s", dlerror());
    if (dlsym(lib, "fake_cuda_stats") == NULL)
        t_skip("the real libcuda.so.1 is found before the fake one");
    *(void **)&register_modes = dlsym(lib, "fake_cuda_register_modes");
    CHECK(register_modes != NULL);
    if (access("/proc/self/numa_maps", R_OK) != 0)
        t_skip("no /proc/self/numa_maps: a kernel without NUMA");
    {
        /* mbind(MPOL_PREFERRED, node 0) of the test's own, not the library's. */
        unsigned long node0 = 1;
        void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char pol[64];
        CHECK(probe != MAP_FAILED);
        if (syscall(SYS_mbind, probe, 4096ul, 1ul, &node0, 2ul, 0ul) != 0)
            t_skip("mbind refused here: %s", strerror(errno)); /* qemu-user: ENOSYS */
        policy_of(probe, 4096, pol, sizeof(pol));
        if (strcmp(pol, "prefer:0") != 0)
            t_skip("/proc/self/numa_maps does not show this process's policies (\"%s\")", pol);
        munmap(probe, 4096);
    }

    snprintf(root, sizeof(root), "%s/sys", t_tmpdir());
    setenv("S3D_TEST_SYSFS_ROOT", root, 1);
    set_numa_node("0000:3b:00.0", "0\n");
    s3d_log_set_callback(on_log, NULL, S3D_LOG_DEBUG);

    CHECK_OK(s3d_device_open(0, &dev));
    CHECK_STREQ(s3d_device_backend(dev), "cuda");
    lookups(dev);
    pools(dev, &seen);
    client_pool(dev, &seen);
    s3d_device_free(dev);
    s3d_log_set_callback(NULL, NULL, 0);
    remove_tree();
    return 0;
}
