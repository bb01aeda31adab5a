/* numa.c - host memory near a GPU: the NUMA node of a device's PCI function, read from sysfs,
 * and a memory policy that prefers it (mbind(2) through syscall(): no libnuma).
 *
 * The node: cuDeviceGetPCIBusId gives the device's PCI address ("0000:3B:00.0", or with an
 * 8-digit domain, "00000000:3B:00.0", as NVML spells it), rewritten as the kernel names the
 * device, lower case with a 4-digit domain, then /sys/bus/pci/devices/<address>/numa_node holds
 * the node of the socket the device hangs off, or -1 where the firmware says nothing (a
 * one-node machine, most VMs). The sysfs root is /sys; builds with the test hooks let tests
 * point S3D_TEST_SYSFS_ROOT at a tree of their own.
 *
 * The policy: MPOL_PREFERRED, not MPOL_BIND, so that a full node still gives pages elsewhere
 * (a transfer must not fail, nor the OOM killer strike, for a placement); MPOL_MF_MOVE, so that
 * pages touched before (a pool used by host-only transfers before its first GPU one) move to
 * the node. The kernel moves only pages this process alone maps and nobody pins; others stay
 * where they are, and mbind still succeeds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/env.h"
#include "common/error.h"
#include "device/device_impl.h"

/* linux/mempolicy.h's values (that header is not in every C library's sysroot). */
#define NUMA_MPOL_PREFERRED 1
#define NUMA_MPOL_MF_MOVE   (1 << 1)
/* Nodes the mask can name: the kernel's own limit on distribution kernels (NODES_SHIFT 10). */
#define NUMA_MAX_NODES 1024

/* The kernel's name of PCI address bus ("0000:3B:00.0", "00000000:3b:00.0") into out:
 * "0000:3b:00.0". 0, or -1 when bus is not an address. */
static int pci_sysfs_name(const char *bus, char *out, size_t cap)
{
    unsigned dom, b, d, fn;
    int end = 0;
    if (sscanf(bus, "%x:%x:%x.%x%n", &dom, &b, &d, &fn, &end) != 4 || bus[end] != '\0' ||
        b > 0xff || d > 0x1f || fn > 7)
        return -1;
    snprintf(out, cap, "%04x:%02x:%02x.%x", dom, b, d, fn);
    return 0;
}

/* The node written in file path, or -1 with the reason in why. */
static int read_node(const char *path, char *why, size_t why_cap)
{
    char buf[32];
    char *end;
    ssize_t n;
    long v;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0)
        snprintf(why, why_cap, "%s: %s", path, strerror(errno));
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    errno = 0;
    v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf || (*end != '\0' && *end != '\n')) {
        snprintf(why, why_cap, "%s: not a number", path);
        return -1;
    }
    if (v < 0) {
        snprintf(why, why_cap, "%s says %ld: the firmware gives the device no node", path, v);
        return -1;
    }
    if (v >= NUMA_MAX_NODES) {
        snprintf(why, why_cap, "%s says %ld: beyond node %d", path, v, NUMA_MAX_NODES - 1);
        return -1;
    }
    return (int)v;
}

int s3d_device_numa_node(struct s3d_device *dev, int ordinal, char *why, size_t why_cap)
{
    struct s3d_error_info e;
    const char *root = S3D_TEST_HOOK("S3D_TEST_SYSFS_ROOT");
    char bus[64], name[64], path[512];
    int rc;

    if (dev == NULL || ordinal < 0 || ordinal >= dev->count) {
        snprintf(why, why_cap, "no GPU %d on the %s backend", ordinal,
                 dev != NULL ? dev->backend : "(none)");
        return -1;
    }
    if (dev->ops->pci_bus_id == NULL) {
        snprintf(why, why_cap, "the %s backend has no PCI bus", dev->backend);
        return -1;
    }
    rc = dev->ops->pci_bus_id(dev, ordinal, bus, sizeof(bus));
    if (rc < 0) {
        s3d_error_get(&e);
        snprintf(why, why_cap, "%s", e.message);
        return -1;
    }
    if (pci_sysfs_name(bus, name, sizeof(name)) < 0) {
        snprintf(why, why_cap, "cuDeviceGetPCIBusId: \"%.63s\" is not a PCI address", bus);
        return -1;
    }
    snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", root ? root : "/sys", name);
    return read_node(path, why, why_cap);
}

int s3d_host_prefer_node(void *p, size_t size, int node, char *why, size_t why_cap)
{
    unsigned long mask[NUMA_MAX_NODES / (8 * sizeof(unsigned long))];
    const size_t bits = 8 * sizeof(unsigned long);
    if (node < 0 || node >= NUMA_MAX_NODES) {
        snprintf(why, why_cap, "node %d is out of range", node);
        return -1;
    }
    memset(mask, 0, sizeof(mask));
    mask[(size_t)node / bits] |= 1ul << ((size_t)node % bits);
    /* maxnode is one more than the bits given: the kernel reads maxnode - 1 of them. Every
     * argument is long-sized: syscall() passes them on as they come. */
    if (syscall(SYS_mbind, p, (unsigned long)size, (unsigned long)NUMA_MPOL_PREFERRED, mask,
                (unsigned long)NUMA_MAX_NODES + 1, (unsigned long)NUMA_MPOL_MF_MOVE) != 0) {
        snprintf(why, why_cap, "mbind(MPOL_PREFERRED, node %d): %s", node, strerror(errno));
        return -1;
    }
    return 0;
}
