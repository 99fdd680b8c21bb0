/*
 * loader_lock.so — calls a function of the program's from inside dl_iterate_phdr's callback,
 * that is with the dynamic linker's lock held, from a library loaded late (the recorder's
 * writer has not seen it: the first stack through it makes the writer list the loaded objects
 * again, and that takes the same lock). crash_app's "loader_lock" rows
 * (tests/integration/snapshot_signals.sh): a signal that lands while the program holds a lock
 * the writer's close needs.
 */
#include <link.h>
#include <stddef.h>

struct loader_lock_call {
    void (*fn)(void *);
    void *arg;
};

static int loader_lock_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)info, (void)size;
    const struct loader_lock_call *c = p;
    c->fn(c->arg);
    return 1; /* once */
}

void loader_lock_call(void (*fn)(void *), void *arg)
{
    struct loader_lock_call c = {fn, arg};
    dl_iterate_phdr(loader_lock_cb, &c);
}
