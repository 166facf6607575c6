/* mkpy-cbs-pass [--check|--fibers] BITCODE OBJECT: the region-splitting pass
 * (cbs_ir.c) as a program (--check: the checker's instrumentation, check_ir.c;
 * --fibers: the fiber engine's ordered object, mkk_fiber_build). jit.c runs it as it runs clang, so that neither
 * LLVM nor a bug in the pass can take the user's process down: on any failure
 * the kernel runs on fibers. Exit status 0, or 1 with the reason on standard
 * output.
 *
 * mkpy-cbs-pass --serve: the same, for many kernels, so that the ~17 ms of
 * loading LLVM is paid once per server, not per kernel. Requests come on
 * standard input, answers go to standard output (jit.c holds the other end of
 * a socket): a request is a line "<mode> <n1> <n2>\n" (mode C: the pass, K:
 * the checker's instrumentation, F: the fiber engine's object) followed by the n1 bytes of the bitcode's
 * path and the n2 bytes of the object's; the answer is a line
 * "<status> <n>\n" (0 or 1, as the exit status above) followed by the n bytes
 * of the reason. The server exits at the end of its input; a crash ends it
 * too, and jit.c then takes the kernel as declined, as before. Started with
 * MKPY_SRV_SOCKET set, the server is a shared daemon (../srvd.c): each
 * connection gets a forked server that serves it as above until its end of
 * input. The pass reads no environment variable but its debugging ones
 * (MKPY_CBS_DUMP, MKPY_CBS_TRACE), with which jit.c runs it as a program. */
#include <llvm-c/Support.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../srvd.h"
#include "cbs_ir.h"

static int one(char mode, const char *bc, const char *obj, char *why, size_t whyn) {
    why[0] = 0;
    return (mode == 'K' ? mkk_check_build : mode == 'F' ? mkk_fiber_build : mkk_cbs_build)(bc, obj, why, whyn) != 0;
}

static char *read_n(size_t n) {
    if (n > 65536) return NULL;
    char *s = malloc(n + 1);
    if (s && fread(s, 1, n, stdin) != n) {
        free(s);
        return NULL;
    }
    if (s) s[n] = 0;
    return s;
}

static int serve(void) {
    char line[128], why[1024];
    while (fgets(line, sizeof line, stdin)) {
        char mode;
        size_t n1, n2;
        if (sscanf(line, "%c %zu %zu", &mode, &n1, &n2) != 3 || (mode != 'C' && mode != 'K' && mode != 'F')) return 2;
        char *bc = read_n(n1), *obj = bc ? read_n(n2) : NULL;
        if (!bc || !obj) {
            free(bc);
            return 2;
        }
        int rc = one(mode, bc, obj, why, sizeof why);
        free(bc);
        free(obj);
        size_t wn = strlen(why);
        if (printf("%d %zu\n", rc, wn) < 0 || fwrite(why, 1, wn, stdout) != wn || fflush(stdout) != 0) return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    int server = argc == 2 && strcmp(argv[1], "--serve") == 0;
    char mode = 'C';
    if (argc == 4 && (strcmp(argv[1], "--check") == 0 || strcmp(argv[1], "--fibers") == 0)) {
        mode = argv[1][2] == 'c' ? 'K' : 'F'; /* the checker mode (check_ir.c), the fiber engine's object */
        argv++;
        argc--;
    }
    if (argc != 3 && !server) {
        fprintf(stdout, "usage: %s [--check|--fibers] BITCODE OBJECT | --serve\n", argv[0]);
        return 2;
    }
#if defined(__x86_64__) && defined(__GLIBC__)
    /* as clang's -fveclib=libmvec for the plain path: vectorised loops call
     * glibc's vector exp/log/sin/cos/pow (a process-wide option, the same for
     * every kernel) */
    const char *opts[] = {argv[0], "-vector-library=LIBMVEC-X86"};
    LLVMParseCommandLineOptions(2, opts, NULL);
#endif
    if (server) {
        (void)mkk_srvd_serve(); /* a shared daemon: returns in the server of a connection */
        return serve();
    }
    char why[1024];
    if (one(mode, argv[1], argv[2], why, sizeof why)) {
        fputs(why, stdout);
        return 1;
    }
    return 0;
}
