/* mkpy-cbs-pass BITCODE OBJECT: the region-splitting pass (cbs_ir.c) as a
 * program. jit.c runs it as it runs clang, so that neither LLVM nor a bug in
 * the pass can take the user's process down: on any failure the kernel runs
 * on fibers. Exit status 0, or 1 with the reason on standard output. */
#include <stdio.h>

#include "cbs_ir.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stdout, "usage: %s BITCODE OBJECT\n", argv[0]);
        return 2;
    }
    char why[1024];
    if (mkk_cbs_build(argv[1], argv[2], why, sizeof why) != 0) {
        fputs(why, stdout);
        return 1;
    }
    return 0;
}
