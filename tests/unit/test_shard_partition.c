/* test_shard_partition.c - a sharded save's partition (s3d_shard_partition, engine/ckpt_write.h):
 * greedy in order, a shard closes when the next tensor would pass the limit, an oversized
 * tensor alone, zero-byte tensors ride along, no tensors is one empty shard. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/ckpt_write.h"
#include "testutil.h"

/* Partitions sizes[0..n) at max; checks the shards' first indexes against want[0..k]. */
static void check(const uint64_t *sizes, size_t n, uint64_t max, const size_t *want, uint32_t k,
                  uint64_t total)
{
    struct s3d_tensor_src t[16];
    size_t first[17];
    uint64_t got_total = 0;
    memset(t, 0, sizeof(t));
    for (size_t i = 0; i < n; i++)
        t[i].nbytes = sizes[i];
    CHECK(s3d_shard_partition(t, n, max, first, &got_total) == k);
    for (uint32_t j = 0; j <= k; j++)
        CHECK(first[j] == want[j]);
    CHECK(got_total == total);
}

int main(void)
{
    /* Exactly full shards, then the rest. */
    check((uint64_t[]){4, 4, 4, 4, 4}, 5, 8, (size_t[]){0, 2, 4, 5}, 3, 20);
    /* A tensor over the limit gets a shard of its own, wherever it is. */
    check((uint64_t[]){3, 20, 3, 3}, 4, 8, (size_t[]){0, 1, 2, 4}, 3, 29);
    check((uint64_t[]){20}, 1, 8, (size_t[]){0, 1}, 1, 20);
    /* Zero-byte tensors never open a shard. */
    check((uint64_t[]){0, 8, 0, 0, 1}, 5, 8, (size_t[]){0, 4, 5}, 2, 9);
    /* Everything fits: one shard. */
    check((uint64_t[]){1, 2, 3}, 3, 100, (size_t[]){0, 3}, 1, 6);
    /* No tensor: one empty shard. */
    check(NULL, 0, 8, (size_t[]){0, 0}, 1, 0);
    printf("ok\n");
    return 0;
}
