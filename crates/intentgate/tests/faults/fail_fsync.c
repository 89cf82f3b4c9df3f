/*
 * A failing fsync, for the fault suite (`faults/fsync.rs`): loaded with LD_PRELOAD into
 * `intentgate serve`, it stands between the gateway's bundled SQLite and the C library.
 *
 * While the file named by INTENTGATE_FSYNC_FAIL_FLAG exists, fsync, fdatasync, syncfs and
 * sync_file_range on a file under the folder INTENTGATE_FSYNC_FAIL_UNDER return -1 with
 * errno EIO, without syncing, as a disk's write error reports itself to the program. Every
 * other call goes through to the C library.
 *
 * Each call on a file under that folder appends one byte to INTENTGATE_FSYNC_FAIL_COUNT:
 * `s` when it went through, `f` when it failed. The test reads it to know the ledger's
 * syncs really came this way, so that it can't pass with a shim nobody calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*sync_fn)(int);
typedef int (*range_fn)(int, off_t, off_t, unsigned int);

/* Whether `fd` names a file under INTENTGATE_FSYNC_FAIL_UNDER. */
static int under_folder(int fd) {
    const char *folder = getenv("INTENTGATE_FSYNC_FAIL_UNDER");
    if (folder == NULL || folder[0] == '\0') {
        return 0;
    }
    char link[64];
    char target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t length = readlink(link, target, sizeof target - 1);
    if (length < 0) {
        return 0;
    }
    target[length] = '\0';
    size_t prefix = strlen(folder);
    return strncmp(target, folder, prefix) == 0 && target[prefix] == '/';
}

/* Whether the flag file exists: the disk fails now. */
static int failing(void) {
    const char *flag = getenv("INTENTGATE_FSYNC_FAIL_FLAG");
    return flag != NULL && access(flag, F_OK) == 0;
}

/* Appends `mark` to the count file; errors are ignored (the test then sees too few). */
static void count(char mark) {
    const char *path = getenv("INTENTGATE_FSYNC_FAIL_COUNT");
    if (path == NULL) {
        return;
    }
    int saved = errno;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        ssize_t written = write(fd, &mark, 1);
        (void)written;
        close(fd);
    }
    errno = saved;
}

/* Decides a call on `fd`: 1 when it must fail with EIO, 0 to call through. */
static int fails(int fd) {
    if (!under_folder(fd)) {
        return 0;
    }
    int fail = failing();
    count(fail ? 'f' : 's');
    return fail;
}

static void *next(const char *name) {
    void *function = dlsym(RTLD_NEXT, name);
    if (function == NULL) {
        fprintf(stderr, "fail_fsync: no %s after this library: %s\n", name, dlerror());
        abort();
    }
    return function;
}

int fsync(int fd) {
    if (fails(fd)) {
        errno = EIO;
        return -1;
    }
    return ((sync_fn)next("fsync"))(fd);
}

int fdatasync(int fd) {
    if (fails(fd)) {
        errno = EIO;
        return -1;
    }
    return ((sync_fn)next("fdatasync"))(fd);
}

int syncfs(int fd) {
    if (fails(fd)) {
        errno = EIO;
        return -1;
    }
    return ((sync_fn)next("syncfs"))(fd);
}

int sync_file_range(int fd, off_t offset, off_t bytes, unsigned int flags) {
    if (fails(fd)) {
        errno = EIO;
        return -1;
    }
    return ((range_fn)next("sync_file_range"))(fd, offset, bytes, flags);
}
