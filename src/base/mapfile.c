#include "base/mapfile.h"
#include "base/status.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

brisk_status mapfile_open(const char *path, mapfile *out) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return bk_fail(BRISK_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return bk_fail(BRISK_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return bk_fail(BRISK_ERR_IO, "%s: mmap: %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
    }
    close(fd);
    return BRISK_OK;
}

void mapfile_close(mapfile *m) {
    if (m && m->data) munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}
