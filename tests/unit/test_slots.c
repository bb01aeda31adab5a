/* test_slots.c - the bounded buffer set of file/stream transfers (engine/slots.h): at most n
 * buffers, reused after they come back, each handed out as an upload part with its own iovec. */
#include <string.h>

#include "engine/slots.h"
#include "testutil.h"

int main(void)
{
    struct s3d_slots s;
    struct s3d_put_part p1, p2;
    char *a, *b, *c;

    CHECK_OK(s3d_slots_init(&s, 2, 100));
    CHECK(s3d_slots_free_count(&s) == 2);
    a = s3d_slot_get(&s);
    b = s3d_slot_get(&s);
    CHECK(a != NULL && b != NULL && a != b);
    memset(a, 'a', 100); /* the full size is writable */
    memset(b, 'b', 100);
    /* All handed out: none free, and that is not out of memory. */
    CHECK(s3d_slot_get(&s) == NULL);
    CHECK(s3d_slots_free_count(&s) == 0);
    CHECK(s3d_slot_index(&s, a) == 0 && s3d_slot_index(&s, b) == 1);

    /* Each part points at its own slot's iovec. */
    memset(&p1, 0, sizeof(p1));
    memset(&p2, 0, sizeof(p2));
    s3d_slot_as_part(&s, b, 60, 7, &p2);
    s3d_slot_as_part(&s, a, 100, 3, &p1);
    CHECK(p1.part_number == 3 && p1.iovcnt == 1 && p1.length == 100 && p1.user == a);
    CHECK(p1.iov->iov_base == a && p1.iov->iov_len == 100);
    CHECK(p2.part_number == 7 && p2.length == 60 && p2.user == b);
    CHECK(p2.iov->iov_base == b && p2.iov->iov_len == 60);
    CHECK(p1.iov != p2.iov);

    /* A buffer given back is the one handed out next (no new allocation). */
    s3d_slot_put(&s, p2.user);
    CHECK(s3d_slots_free_count(&s) == 1);
    c = s3d_slot_get(&s);
    CHECK(c == b);
    s3d_slot_put(&s, a);
    s3d_slot_put(&s, c);
    CHECK(s3d_slots_free_count(&s) == 2);
    s3d_slots_free(&s);
    CHECK(s.buf == NULL && s.n == 0);
    s3d_slots_free(&s); /* twice is fine */

    /* Size 0 still gives a usable buffer. */
    CHECK_OK(s3d_slots_init(&s, 1, 0));
    CHECK(s3d_slot_get(&s) != NULL);
    s3d_slots_free(&s);
    printf("ok\n");
    return 0;
}
