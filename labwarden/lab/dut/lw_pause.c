/* lw-pause PID STARTTIME DEADLINE_MS: hold every thread of PID in a ptrace stop, then resume it.
 *
 * Why ptrace and not SIGSTOP: a SIGSTOPped process stays stopped when whoever stopped it dies,
 * while a tracee is detached -- and so resumed -- by the kernel when its tracer exits, even on
 * SIGKILL. The pause therefore cannot outlive this helper, and this helper ends at the first of:
 *   - the deadline (DEADLINE_MS after start),
 *   - the SSH session going away: SIGHUP (sshd hangs up the session), or stdout's reader gone
 *     (POLLERR/POLLHUP on fd 1); stdin is not watched, as the caller closes it at once,
 *   - SIGTERM / SIGINT, or the parent shell dying (PR_SET_PDEATHSIG -> SIGHUP).
 * It refuses (exit 2) pid 1, itself, its parent chain, and a pid whose start time differs (the
 * process was replaced). Prints "paused PID" once all threads are stopped and
 * "resumed PID REASON" after detaching; "gone PID" (exit 3) if the process died meanwhile.
 * Plain C99 + Linux ptrace/prctl: builds with any (cross) compiler for a Linux DUT.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_SEIZE /* old libc headers: values from linux/ptrace.h */
#define PTRACE_SEIZE 0x4206
#define PTRACE_INTERRUPT 0x4207
#endif
#ifndef __WALL
#define __WALL 0x40000000
#endif

#define MAX_THREADS 1024
#define MAX_DEADLINE_MS 600000L

static int sigpipe_fd[2] = { -1, -1 };
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	int saved = errno;
	if (sig != SIGCHLD)
		got_signal = sig;
	(void)!write(sigpipe_fd[1], "x", 1); /* wake poll(); pipe is non-blocking */
	errno = saved;
}

/* Fields of /proc/N/stat after the last ')' (comm may hold spaces and parens): [0] is state. */
static int read_stat(long pid, char *state, long *ppid, unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	/* state=3 ppid=4 ... starttime=22 (1-based field numbers) */
	if (sscanf(p + 1, " %c %ld %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
		   state, ppid, start) != 3)
		return -1;
	return 0;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long tids[MAX_THREADS];
static int inject[MAX_THREADS]; /* signal to re-inject on detach (a signal-delivery-stop) */
static int ntids;

static int seized(long tid)
{
	for (int i = 0; i < ntids; i++)
		if (tids[i] == tid)
			return 1;
	return 0;
}

/* Wait for thread i to enter a ptrace stop. Returns 0 stopped, -1 exited. Whatever stop comes
 * first holds the thread: an interrupt-stop or group-stop (PTRACE_EVENT_STOP), or a
 * signal-delivery-stop, whose signal we keep and re-inject at detach so it is not lost. */
static int wait_stopped(int i)
{
	int st;
	for (;;) {
		if (waitpid((pid_t)tids[i], &st, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return -1;
		if (WIFSTOPPED(st)) {
			if ((st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP)
				inject[i] = WSTOPSIG(st);
			return 0;
		}
	}
}

/* Seize + interrupt every thread; repeat until a pass over /proc/PID/task finds no new thread
 * (a running thread may clone while we work; once all are stopped, none can). */
static int seize_all(long pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/task", pid);
	for (int fresh = 1; fresh;) {
		fresh = 0;
		DIR *d = opendir(path);
		if (!d)
			return -1;
		struct dirent *e;
		while ((e = readdir(d))) {
			long tid = atol(e->d_name);
			if (tid <= 0 || seized(tid))
				continue;
			if (ntids == MAX_THREADS) {
				closedir(d);
				return -1;
			}
			if (ptrace(PTRACE_SEIZE, (pid_t)tid, 0, 0) < 0) /* no PTRACE_O_EXITKILL, on purpose */
				continue; /* thread already exited */
			tids[ntids] = tid;
			ptrace(PTRACE_INTERRUPT, (pid_t)tid, 0, 0);
			if (wait_stopped(ntids) == 0)
				ntids++;
			fresh = 1;
		}
		closedir(d);
	}
	return ntids > 0 ? 0 : -1;
}

static void release(void)
{
	for (int i = 0; i < ntids; i++)
		ptrace(PTRACE_DETACH, (pid_t)tids[i], 0, (void *)(long)inject[i]);
}

static int refuse(const char *why, long pid)
{
	fprintf(stderr, "lw-pause: refusing pid %ld: %s\n", pid, why);
	return 2;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: lw-pause PID STARTTIME DEADLINE_MS\n");
		return 2;
	}
	long pid = atol(argv[1]);
	unsigned long long want_start = strtoull(argv[2], NULL, 10), start;
	long deadline_ms = atol(argv[3]);
	char state;
	long ppid;
	if (pid <= 1)
		return refuse("pid 1 or not a pid", pid);
	if (deadline_ms <= 0 || deadline_ms > MAX_DEADLINE_MS)
		return refuse("DEADLINE_MS must be in 1..600000", pid);
	for (long p = getpid(); p > 1; p = ppid) { /* ourselves, our shell, sshd, ... */
		if (p == pid)
			return refuse("it is this helper or one of its ancestors (the SSH session)", pid);
		if (read_stat(p, &state, &ppid, &start) < 0)
			break;
	}
	if (read_stat(pid, &state, &ppid, &start) < 0)
		return refuse("no such process", pid);
	if (start != want_start)
		return refuse("start time differs: the process was replaced", pid);

	/* Signals arrive through a self-pipe so poll() sees them without races. */
	if (pipe(sigpipe_fd) < 0)
		return 1;
	fcntl(sigpipe_fd[0], F_SETFL, O_NONBLOCK);
	fcntl(sigpipe_fd[1], F_SETFL, O_NONBLOCK);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGCHLD, &sa, NULL); /* tracee state changes (e.g. it was SIGKILLed) */
	signal(SIGPIPE, SIG_IGN); /* a gone reader is seen by poll, not by dying mid-detach */
	prctl(PR_SET_PDEATHSIG, SIGHUP);
	if (getppid() == 1) /* parent already gone before prctl took effect */
		return 1;
	long long deadline = now_ms() + deadline_ms;

	if (seize_all(pid) < 0) {
		release();
		fprintf(stderr, "lw-pause: cannot trace pid %ld: %s\n", pid, strerror(errno));
		return 1;
	}
	/* Re-check after seizing: the pid cannot be reused while we trace it. */
	if (read_stat(pid, &state, &ppid, &start) < 0 || start != want_start) {
		release();
		return refuse("start time changed while seizing", pid);
	}
	printf("paused %ld\n", pid);
	fflush(stdout);

	/* Hold. A thread in a ptrace stop runs nothing: signals sent to it (SIGCONT included) stay
	 * pending until we detach, and then are delivered normally; SIGKILL still kills it. So the
	 * pause holds without re-injecting anything while we wait. */
	const char *reason = "deadline";
	for (;;) {
		long long left = deadline - now_ms();
		if (left <= 0)
			break;
		if (got_signal) {
			reason = got_signal == SIGHUP ? "hangup" : "signal";
			break;
		}
		struct pollfd fds[2] = { { sigpipe_fd[0], POLLIN, 0 }, { 1, 0, 0 } };
		int n = poll(fds, 2, left > 1000 ? 1000 : (int)left);
		if (n > 0 && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL))) {
			reason = "hangup";
			break;
		}
		if (n > 0 && (fds[0].revents & POLLIN)) {
			char b[64];
			while (read(sigpipe_fd[0], b, sizeof b) > 0)
				;
		}
		/* The main thread exiting means the process is gone (or exec'd; either way, done). */
		int st;
		pid_t w = waitpid((pid_t)pid, &st, WNOHANG | __WALL);
		if (w == (pid_t)pid && (WIFEXITED(st) || WIFSIGNALED(st))) {
			release();
			printf("gone %ld\n", pid);
			return 3;
		}
		if (w < 0 && errno == ECHILD) {
			printf("gone %ld\n", pid);
			return 3;
		}
	}
	release();
	printf("resumed %ld %s\n", pid, reason);
	fflush(stdout);
	return 0;
}
