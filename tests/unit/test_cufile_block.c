/* test_cufile_block.c - which block devices mode AUTO counts as NVMe before it lets cuFile go
 * direct (s3d_cufile_block_nvme), on a sysfs tree of the test's own: NVMe namespaces and
 * their partitions; md RAID and dm (LVM) volumes over them, stacked, as a DGX's /raid is;
 * and what is not NVMe: a SATA partition, a virtio disk, a RAID mixing NVMe and SATA, a volume
 * with no slaves, a slave loop, a device sysfs does not list. Needs no GPU and no cuFile. */
#include <sys/stat.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

static char g_root[512];

/* Makes folder root/rel and its parents. */
static void mkdirs(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    for (char *s = p + strlen(g_root) + 1; *s != '\0'; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* root/rel, an empty file. */
static void touch(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fclose(f);
}

/* root/link -> root/target (absolute, as sysfs's relative links resolve). */
static void link_to(const char *link, const char *target)
{
    char l[1024], t[1024];
    snprintf(l, sizeof(l), "%s/%s", g_root, link);
    snprintf(t, sizeof(t), "%s/%s", g_root, target);
    CHECK(symlink(t, l) == 0);
}

#define PCI  "devices/pci0000:00"
#define NV0  PCI "/0000:00:01.0/nvme/nvme0/nvme0n1"
#define NV1  PCI "/0000:00:02.0/nvme/nvme1/nvme1n1"
#define SDA  PCI "/0000:00:03.0/ata1/host0/target0:0:0/0:0:0:0/block/sda"
#define VDA  PCI "/0000:00:04.0/virtio1/block/vda"
#define VIRT "devices/virtual/block"

int main(void)
{
    static const struct {
        unsigned maj, min;
        const char *dev; /* what /dev/block/maj:min links to; NULL: no entry */
        int nvme;
    } rows[] = {
        {259, 0, NV0, 1},               /* an NVMe namespace */
        {259, 1, NV0 "/nvme0n1p1", 1},  /* its partition */
        {9, 0, VIRT "/md0", 1},         /* md RAID 0 of an NVMe partition and a namespace */
        {259, 9, VIRT "/md0/md0p1", 1}, /* a partition of that RAID */
        {253, 0, VIRT "/dm-0", 1},      /* LVM on that RAID */
        {9, 1, VIRT "/md1", 0},         /* RAID of NVMe and a SATA partition */
        {253, 1, VIRT "/dm-1", 0},      /* LVM on that */
        {9, 2, VIRT "/md2", 0},         /* no slaves (yet) */
        {253, 2, VIRT "/dm-2", 0},      /* its own slave: a loop, not followed forever */
        {8, 1, SDA "/sda1", 0},         /* a SATA partition */
        {252, 0, VDA, 0},               /* a VM's virtio disk */
        {7, 7, NULL, 0},                /* not in sysfs */
    };

    snprintf(g_root, sizeof(g_root), "%s/sys", t_tmpdir());
    CHECK(mkdir(g_root, 0755) == 0);
    mkdirs("dev/block");
    mkdirs(NV0 "/nvme0n1p1");
    touch(NV0 "/nvme0n1p1/partition");
    mkdirs(NV1);
    mkdirs(SDA "/sda1");
    touch(SDA "/sda1/partition");
    mkdirs(VDA);
    mkdirs(VIRT "/md0/slaves");
    mkdirs(VIRT "/md0/md0p1");
    touch(VIRT "/md0/md0p1/partition");
    link_to(VIRT "/md0/slaves/nvme0n1p1", NV0 "/nvme0n1p1");
    link_to(VIRT "/md0/slaves/nvme1n1", NV1);
    mkdirs(VIRT "/md1/slaves");
    link_to(VIRT "/md1/slaves/nvme1n1", NV1);
    link_to(VIRT "/md1/slaves/sda1", SDA "/sda1");
    mkdirs(VIRT "/md2/slaves");
    mkdirs(VIRT "/dm-0/slaves");
    link_to(VIRT "/dm-0/slaves/md0", VIRT "/md0");
    mkdirs(VIRT "/dm-1/slaves");
    link_to(VIRT "/dm-1/slaves/md1", VIRT "/md1");
    mkdirs(VIRT "/dm-2/slaves");
    link_to(VIRT "/dm-2/slaves/dm-2", VIRT "/dm-2");
    for (size_t i = 0; i < S3D_ARRAY_LEN(rows); i++) {
        char link[64];
        if (rows[i].dev == NULL)
            continue;
        snprintf(link, sizeof(link), "dev/block/%u:%u", rows[i].maj, rows[i].min);
        link_to(link, rows[i].dev);
    }

    for (size_t i = 0; i < S3D_ARRAY_LEN(rows); i++) {
        const int got = s3d_cufile_block_nvme(g_root, rows[i].maj, rows[i].min);
        if (got != rows[i].nvme)
            t_fail(__FILE__, __LINE__, "%u:%u (%s): NVMe %d, expected %d", rows[i].maj, rows[i].min,
                   rows[i].dev ? rows[i].dev : "none", got, rows[i].nvme);
    }
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t_tmpdir());
    CHECK(system(cmd) == 0);
    printf("ok: %zu block devices\n", S3D_ARRAY_LEN(rows));
    return 0;
}
