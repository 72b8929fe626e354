/* The smallest Linux program: writes a line and its arguments, exits with status 3. */
#include <stdio.h>

int main(int argc, char **argv) {
    printf("hello from a static Linux program\n");
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    return 3;
}
