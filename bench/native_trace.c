/* Preloaded into a probe's child (bench/vlm_gpu_probe.py --native-trace): on SIGABRT or SIGSEGV
 * print the native stack (library + offset, or symbol where exported) to stderr, then die of the
 * same signal. For machines without gdb; glibc's backtrace() needs no debug information. */
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void on_fatal(int sig) {
    void *frames[64];
    int count = backtrace(frames, 64);
    const char *head = sig == SIGABRT ? "native stack (SIGABRT):\n" : "native stack (SIGSEGV):\n";
    write(2, head, strlen(head));
    backtrace_symbols_fd(frames, count, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void install(void) {
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not inside the handler */
    signal(SIGABRT, on_fatal);
    signal(SIGSEGV, on_fatal);
}
