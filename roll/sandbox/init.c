/* The sandbox's init, compiled: PID 1 of every run's PID namespace. The same contract as
 * roll/sandbox/init.py (read its docstring); this version exists because starting a Python
 * interpreter for the init costs more CPU than the whole rest of the sandbox's start.
 *
 *   init "REPORT_FD;CPU_S;BACKSTOP_S;RLIMIT_X=v,RLIMIT_Y=v" COMMAND...
 *
 * Before the program exists it applies the rlimits to itself (every process of the run inherits
 * them), makes itself non-dumpable and keeps every signal at its default disposition (the kernel
 * drops signals sent to a PID namespace's init from inside it unless the init handles them).
 * It then spawns the program with default dispositions and an empty mask, reaps every process
 * of the namespace, kills the whole namespace when the run's CPU time (reaped children plus the
 * live processes in /proc) passes the budget or the backstop deadline passes, and writes one
 * JSON report to REPORT_FD: {"status": wait status or null, "cpu_s": ..., "limit": ...}.
 *
 * Built by roll/sandbox/init_build.py with the system C compiler; kept warning-free with
 * -Wall -Wextra -O2. It runs under the run's seccomp filter (roll/sandbox/seccomp.py), so it
 * uses only system calls the filter allows (posix_spawn falls back from clone3 to clone).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TICK_NS 50000000L /* 50 ms: how often the run's CPU time is counted */

static const struct {
    const char *name;
    int resource;
} LIMITS[] = {
    {"RLIMIT_CPU", RLIMIT_CPU},       {"RLIMIT_AS", RLIMIT_AS},
    {"RLIMIT_FSIZE", RLIMIT_FSIZE},   {"RLIMIT_NPROC", RLIMIT_NPROC},
    {"RLIMIT_NOFILE", RLIMIT_NOFILE}, {"RLIMIT_CORE", RLIMIT_CORE},
};

static void say(const char *text) {
    ssize_t unused = write(2, text, strlen(text));
    (void)unused;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "RLIMIT_X=v,RLIMIT_Y=v": soft and hard limits both set to v. */
static int apply_limits(char *text) {
    for (char *item = strtok(text, ","); item != NULL; item = strtok(NULL, ",")) {
        char *eq = strchr(item, '=');
        if (eq == NULL)
            return -1;
        *eq = '\0';
        char *end;
        errno = 0;
        unsigned long long value = strtoull(eq + 1, &end, 10);
        if (errno != 0 || *end != '\0' || end == eq + 1)
            return -1;
        size_t i = 0;
        while (i < sizeof LIMITS / sizeof LIMITS[0] && strcmp(LIMITS[i].name, item) != 0)
            i++;
        if (i == sizeof LIMITS / sizeof LIMITS[0])
            return -1;
        struct rlimit rl = {(rlim_t)value, (rlim_t)value};
        if (setrlimit(LIMITS[i].resource, &rl) != 0)
            return -1;
    }
    return 0;
}

static double reaped_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* utime + stime + cutime + cstime of every live process of the namespace but this one. */
static double live_cpu_s(long tick) {
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 0.0;
    unsigned long long total = 0;
    struct dirent *entry;
    char path[sizeof entry->d_name + 8], buf[1024];
    while ((entry = readdir(proc)) != NULL) {
        const char *name = entry->d_name;
        if (name[0] < '1' || name[0] > '9' || strcmp(name, "1") == 0 || strspn(name, "0123456789") != strlen(name))
            continue;
        snprintf(path, sizeof path, "%s/stat", name);
        int fd = openat(dirfd(proc), path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* exited meanwhile: it was reaped, so it is in RUSAGE_CHILDREN */
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
        if (p == NULL)
            continue;
        /* fields after the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt
         * majflt cmajflt utime stime cutime cstime */
        unsigned long long t[4];
        if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                   &t[0], &t[1], &t[2], &t[3]) == 4)
            total += t[0] + t[1] + t[2] + t[3];
    }
    closedir(proc);
    return (double)total / (double)tick;
}

/* Reap children; returns 1 and sets *status when ``pid`` was among them. */
static int reap(pid_t pid, int block, int *status) {
    int found = 0, st;
    for (;;) {
        pid_t p = waitpid(-1, &st, __WALL | (block ? 0 : WNOHANG));
        if (p < 0 && errno == EINTR)
            continue;
        if (p <= 0)
            return found; /* none left (ECHILD) or none exited yet */
        if (p == pid) {
            *status = st;
            found = 1;
        }
    }
}

static void report(int fd, int has_status, int status, double cpu_s, const char *limit) {
    char text[160], num[24] = "null";
    if (has_status)
        snprintf(num, sizeof num, "%d", status);
    int len = snprintf(text, sizeof text, "{\"status\": %s, \"cpu_s\": %.6f, \"limit\": \"%s\"}", num, cpu_s, limit);
    for (int done = 0; done < len;) {
        ssize_t n = write(fd, text + done, (size_t)(len - done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the parent is gone: nobody to tell */
        done += (int)n;
    }
}

int main(int argc, char **argv) {
    if (getpid() != 1) {
        /* kill(-1) below would reach every process of the caller's uid outside a PID namespace */
        say("sandbox init: refusing to run outside a PID namespace of its own\n");
        return 126;
    }
    char *fields[4];
    char *rest = argc >= 3 ? argv[1] : NULL;
    for (int i = 0; i < 4; i++)
        fields[i] = rest == NULL ? NULL : strsep(&rest, ";");
    char *end_cpu = NULL, *end_backstop = NULL;
    int out = fields[0] != NULL ? atoi(fields[0]) : -1;
    double budget = fields[1] != NULL ? strtod(fields[1], &end_cpu) : 0.0;
    double backstop = fields[2] != NULL ? strtod(fields[2], &end_backstop) : 0.0;
    if (fields[3] == NULL || rest != NULL || out < 3 || end_cpu == fields[1] || *end_cpu != '\0' ||
        end_backstop == fields[2] || *end_backstop != '\0') {
        say("sandbox init: usage: init 'REPORT_FD;CPU_S;BACKSTOP_S;RLIMIT_X=v,...' COMMAND...\n");
        return 126;
    }
    if (fcntl(out, F_SETFD, FD_CLOEXEC) != 0) {
        say("sandbox init: bad report descriptor\n");
        return 126;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        say("sandbox init: prctl(PR_SET_DUMPABLE) failed\n");
        return 126;
    }
    if (apply_limits(fields[3]) != 0) {
        say("sandbox init: cannot apply the run's limits\n");
        return 126;
    }
    /* EPIPE rather than a signal if the parent closed the report pipe (dispositions are reset
     * for the program below). */
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld, empty, all;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigemptyset(&empty);
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    long tick = sysconf(_SC_CLK_TCK);
    double deadline = now_s() + backstop;

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setsigdefault(&attr, &all);
    pid_t pid;
    int err = posix_spawnp(&pid, argv[2], NULL, &attr, argv + 2, environ);
    posix_spawnattr_destroy(&attr);
    if (err != 0) {
        char text[512];
        snprintf(text, sizeof text, "sandbox: cannot execute %s: %s\n", argv[2], strerror(err));
        say(text);
        report(out, 0, 0, 0.0, "");
        return 127;
    }

    int status = 0, has_status = 0;
    const char *limit = "";
    double next_check = now_s() + TICK_NS / 1e9;
    const struct timespec wait_tick = {0, TICK_NS};
    while (!has_status) {
        sigtimedwait(&chld, NULL, &wait_tick);
        if (reap(pid, 0, &status)) {
            has_status = 1;
            break;
        }
        double now = now_s();
        if (now >= deadline) {
            limit = "timeout";
            break;
        }
        if (now >= next_check) {
            next_check = now + TICK_NS / 1e9;
            if (reaped_cpu_s() + live_cpu_s(tick) > budget) {
                limit = "cpu_time";
                break;
            }
        }
    }
    /* Whatever the program left behind goes with it (kill(-1) spares only this init). */
    kill(-1, SIGKILL);
    if (reap(pid, 1, &status))
        has_status = 1;
    report(out, has_status, status, reaped_cpu_s(), limit);
    if (!has_status)
        return 137;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
