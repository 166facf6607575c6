/* mkpy-cbs-pass BITCODE OBJECT: the region-splitting pass (cbs_ir.c) as a
 * program. jit.c runs it as it runs clang, so that neither LLVM nor a bug in
 * the pass can take the user's process down: on any failure the kernel runs
 * on fibers. Exit status 0, or 1 with the reason on standard output. */
#include <llvm-c/Support.h>
#include <stdio.h>
#include <string.h>

#include "cbs_ir.h"

int main(int argc, char **argv) {
    int check = argc == 4 && strcmp(argv[1], "--check") == 0; /* the checker mode (check_ir.c) */
    if (check) {
        argv++;
        argc--;
    }
    if (argc != 3) {
        fprintf(stdout, "usage: %s [--check] BITCODE OBJECT\n", argv[0]);
        return 2;
    }
#if defined(__x86_64__) && defined(__GLIBC__)
    /* as clang's -fveclib=libmvec for the plain path: vectorised loops call
     * glibc's vector exp/log/sin/cos/pow (a process-wide option: this program
     * runs one pass and exits) */
    const char *opts[] = {argv[0], "-vector-library=LIBMVEC-X86"};
    LLVMParseCommandLineOptions(2, opts, NULL);
#endif
    char why[1024];
    if ((check ? mkk_check_build : mkk_cbs_build)(argv[1], argv[2], why, sizeof why) != 0) {
        fputs(why, stdout);
        return 1;
    }
    return 0;
}
