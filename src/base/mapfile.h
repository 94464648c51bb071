/* mapfile.h — read-only memory-mapped files. The mapping lives until
 * mapfile_close(); pointers into it are valid until then. */
#ifndef BK_MAPFILE_H
#define BK_MAPFILE_H
#include <stdbool.h>
#include <stddef.h>
#include "brisk.h"

typedef struct mapfile {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;               /* bytes */
} mapfile;

brisk_status mapfile_open(const char *path, mapfile *out);
/* With copy, the file is read into private anonymous memory (huge pages where the kernel gives
 * them) instead of being mapped: llama.cpp's --no-mmap. */
brisk_status mapfile_open_ex(const char *path, bool copy, mapfile *out);
void mapfile_close(mapfile *m);
#endif
