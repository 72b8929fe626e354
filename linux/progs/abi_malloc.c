/* malloc of small and large blocks (brk and mmap underneath), each filled and checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    enum { N = 2000 };
    static unsigned char *p[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (i * 37) % 500;
        p[i] = malloc(n);
        if (!p[i]) { printf("small malloc %d failed\n", i); return 1; }
        memset(p[i], i & 0xff, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (i * 37) % 500;
        for (size_t j = 0; j < n; j++)
            if (p[i][j] != (i & 0xff)) { printf("small block %d corrupt\n", i); return 1; }
    }
    for (int i = 0; i < N; i += 2)
        free(p[i]);
    size_t big = 8 << 20;
    unsigned char *b = malloc(big);
    if (!b) { printf("large malloc failed\n"); return 1; }
    for (size_t j = 0; j < big; j += 4096)
        b[j] = (unsigned char)(j >> 12);
    for (size_t j = 0; j < big; j += 4096)
        if (b[j] != (unsigned char)(j >> 12)) { printf("large block corrupt\n"); return 1; }
    b = realloc(b, 2 * big);
    if (!b || b[4096] != 1) { printf("realloc lost data\n"); return 1; }
    free(b);
    for (int i = 1; i < N; i += 2)
        free(p[i]);
    printf("malloc ok: %d small blocks, one of %zu MiB\n", N, 2 * big >> 20);
    return 0;
}
