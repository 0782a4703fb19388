/*
 * The command stub of a dryexec trial (see guest/cmdstub_linux.go, type
 * cmdStub): a process the guest starts ahead of time, already in the
 * command's namespaces, session, confinement and stdio, that waits for the
 * command and execs it. Written without libc so that it is a few hundred
 * bytes of code with nothing to tear down when it execs: that exec is on
 * every trial's path.
 *
 * Protocol (wire.StubRequest): fd 3 carries a request (struct req, then
 * `size` bytes of NUL-terminated strings: program, directory, argv...,
 * env...); a program without a slash is searched for in the request's PATH,
 * as guest.execSearch does; fd 4 is closed by a successful exec; before
 * the first exec the stub writes its own CPU time to it ({STAGE_CPU, 0}
 * and two uint64: user and system microseconds, getrusage's), which the
 * guest takes off the command's (the stub's start, an exec that tears down
 * a copy of the guest's address space, is not the command's), and a failure
 * writes {stage, errno} (two uint32) to it; fd 5 becomes stdin
 * when flag 1 is set; fd 6 is the gate: nothing of fd 3 is read before EOF
 * there (the guest opens it once the stub is traced and limited). EOF on
 * fd 3 before a request: exit 0. fd 7, when open, is a Landlock ruleset:
 * the stub enters it (landlock_restrict_self) before anything else, so that
 * the command runs in a domain nested in the guest's launcher's (see
 * guest.nestedRuleset).
 *
 * The stub first unblocks every signal: it inherits the launcher thread's
 * mask, which blocks them all (see guest.blockAllSignals).
 *
 * Trampoline mode, when it has arguments (argv: stub, PATH, ARGV0, ARGS...):
 * unblock every signal and execve(PATH, ARGV0..., environ); on failure say
 * so on fd 2 and exit 127. A session's execs start through it. With
 * argv: stub, -w, FD, PATH, ARGV0, ARGS... it first reads FD to its EOF
 * and closes it: an ns session's exec starts in a user namespace whose id
 * maps the guest writes once the process exists (guest.mapLater), and the
 * command must start mapped (its capabilities are computed at its exec).
 * The stub itself started unmapped, holding its capabilities as ambient ones
 * (no_new_privs would not let an exec regain them); it clears those, and the
 * inheritable set raising them took, before the exec, which then gives the
 * command what its uid gives it, as a process started mapped gets.
 *
 * Build: `make stub` (gcc, x86-64), which regenerates guest/cmdstub_amd64.go.
 */

typedef unsigned long u64;
typedef unsigned int u32;

enum { SYS_read = 0, SYS_write = 1, SYS_close = 3, SYS_mmap = 9, SYS_rt_sigprocmask = 14, SYS_dup2 = 33,
       SYS_execve = 59, SYS_fcntl = 72, SYS_chdir = 80, SYS_getrusage = 98, SYS_capget = 125, SYS_capset = 126,
       SYS_prctl = 157,
       SYS_exit_group = 231,
       SYS_landlock_restrict_self = 446 };
enum { ENOENT = 2, EINTR = 4, EBADF = 9, EIO = 5, EACCES = 13, ENOTDIR = 20, EINVAL = 22, ELOOP = 40,
       ENAMETOOLONG = 36 };
enum { PATHBUF = 4096 };
enum { STAGE_REQUEST = 1, STAGE_MEMORY, STAGE_READ, STAGE_CHDIR, STAGE_STDIN, STAGE_EXEC, STAGE_CONFINE };
enum { STAGE_CPU = 0x100 };

static long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

struct req {
	u32 magic, flags, argc, envc;
	u64 size;
};

static __attribute__((noreturn)) void fail(u32 stage, long err)
{
	u32 m[2];
	m[0] = stage;
	m[1] = (u32)-err;
	sys3(SYS_write, 4, (long)m, sizeof m);
	for (;;)
		sys3(SYS_exit_group, 127, 0, 0);
}

/* cpu writes the stub's CPU time so far to fd 4 (see the protocol above). */
static void cpu(void)
{
	long ru[18]; /* struct rusage: ru_utime, ru_stime (timevals), 14 longs */
	u64 m[3];

	if (sys3(SYS_getrusage, 0 /* RUSAGE_SELF */, (long)ru, 0) < 0)
		return;
	m[0] = STAGE_CPU;
	m[1] = (u64)(ru[0] * 1000000 + ru[1]);
	m[2] = (u64)(ru[2] * 1000000 + ru[3]);
	sys3(SYS_write, 4, (long)m, sizeof m);
}

/* readfull reads exactly n bytes from fd 3: 0, or 1 at EOF before any byte,
 * or -1. */
static int readfull(char *p, u64 n)
{
	u64 got = 0;
	while (got < n) {
		long r = sys3(SYS_read, 3, (long)(p + got), (long)(n - got));
		if (r == -EINTR)
			continue;
		if (r == 0 && got == 0)
			return 1;
		if (r <= 0)
			return -1;
		got += (u64)r;
	}
	return 0;
}

/* search execs prog like a shell: itself if it has a slash, else each entry
 * of the last PATH= in env (an empty entry is "."), going on past ENOENT,
 * ENOTDIR, ELOOP, ENAMETOOLONG and EACCES (which is the answer if nothing
 * runs). No PATH: ENOENT. It returns only on failure: -errno. */
static long search(char *prog, char **argv, char **env, char *buf)
{
	char *p, *path = 0, **e;
	long r, answer = -ENOENT;
	u64 dl, nl;

	for (p = prog; *p; p++)
		if (*p == '/')
			return sys3(SYS_execve, (long)prog, (long)argv, (long)env);
	nl = (u64)(p - prog);
	for (e = env; *e; e++)
		if (e[0][0] == 'P' && e[0][1] == 'A' && e[0][2] == 'T' && e[0][3] == 'H' && e[0][4] == '=')
			path = *e + 5;
	if (!path || !*path)
		return answer;
	for (;;) {
		char *end = path;
		while (*end && *end != ':')
			end++;
		dl = (u64)(end - path);
		if (dl == 0) {
			buf[0] = '.';
			dl = 1;
		} else if (dl + 1 + nl + 1 <= PATHBUF) {
			for (u64 i = 0; i < dl; i++)
				buf[i] = path[i];
		}
		if (dl + 1 + nl + 1 > PATHBUF) {
			r = -ENAMETOOLONG;
		} else {
			buf[dl] = '/';
			for (u64 i = 0; i <= nl; i++)
				buf[dl + 1 + i] = prog[i];
			r = sys3(SYS_execve, (long)buf, (long)argv, (long)env);
		}
		if (r == -EACCES)
			answer = r;
		else if (r != -ENOENT && r != -ENOTDIR && r != -ELOOP && r != -ENAMETOOLONG)
			return r;
		if (!*end)
			return answer;
		path = end + 1;
	}
}

/* trampoline execs argv[1] with argv[2...] and never returns. */
static __attribute__((noreturn)) void trampoline(char **argv, char **env)
{
	static const char msg[] = "dryexec: cannot execute the session's process\n";

	sys3(SYS_execve, (long)argv[1], (long)(argv + 2), (long)env);
	sys3(SYS_write, 2, (long)msg, sizeof msg - 1);
	for (;;)
		sys3(SYS_exit_group, 127, 0, 0);
}

/* awaitfd reads fd (decimal in s) to its EOF and closes it; on a bad
 * number or a read error it says so and exits 127. */
static void awaitfd(const char *s)
{
	static const char msg[] = "dryexec: the session's process was not released\n";
	long fd = 0, r;
	char c;
	u32 hdr[2], data[6];

	if (!*s)
		goto bad;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || fd > 100000)
			goto bad;
		fd = fd * 10 + (*s - '0');
	}
	for (;;) {
		r = sys3(SYS_read, fd, (long)&c, 1);
		if (r == 0)
			break;
		if (r < 0 && r != -EINTR)
			goto bad;
	}
	sys3(SYS_close, fd, 0, 0);
	/* PR_CAP_AMBIENT (47), PR_CAP_AMBIENT_CLEAR_ALL (4) */
	if (sys6(SYS_prctl, 47, 4, 0, 0, 0, 0) < 0)
		goto bad;
	/* _LINUX_CAPABILITY_VERSION_3: two {effective, permitted, inheritable}. */
	hdr[0] = 0x20080522;
	hdr[1] = 0;
	if (sys3(SYS_capget, (long)hdr, (long)data, 0) < 0)
		goto bad;
	data[2] = data[5] = 0;
	if (sys3(SYS_capset, (long)hdr, (long)data, 0) < 0)
		goto bad;
	return;
bad:
	sys3(SYS_write, 2, (long)msg, sizeof msg - 1);
	for (;;)
		sys3(SYS_exit_group, 127, 0, 0);
}

__attribute__((noreturn, used)) void stub_main(long *sp)
{
	struct req h;
	char *s, *end, *path = 0, *cwd = 0;
	char **v;
	u64 nptr, len, i;
	long m, r;
	u64 none = 0;
	long argc = sp[0];
	char **argv = (char **)(sp + 1);

	/* SIG_SETMASK to the empty set: the command starts with nothing blocked. */
	sys6(SYS_rt_sigprocmask, 2, (long)&none, 0, sizeof none, 0, 0);
	if (argc >= 5 && argv[1][0] == '-' && argv[1][1] == 'w' && !argv[1][2]) {
		awaitfd(argv[2]);
		trampoline(argv + 2, argv + argc + 1);
	}
	if (argc >= 3)
		trampoline(argv, argv + argc + 1);
	if (sys3(SYS_fcntl, 4, 2 /* F_SETFD */, 1 /* FD_CLOEXEC */) < 0)
		fail(STAGE_REQUEST, -EIO);
	/* A ruleset only when fd 7 is open: a closed fd 7 is no ruleset on every
	 * kernel, also one without Landlock (gVisor's answers landlock_restrict_self
	 * with ENOSYS, not EBADF); an open one that cannot be entered fails. */
	if (sys3(SYS_fcntl, 7, 1 /* F_GETFD */, 0) >= 0) {
		r = sys3(SYS_landlock_restrict_self, 7, 0, 0);
		if (r < 0)
			fail(STAGE_CONFINE, r);
		sys3(SYS_close, 7, 0, 0);
	}
	for (;;) {
		char c;
		r = sys3(SYS_read, 6, (long)&c, 1);
		if (r == 0)
			break;
		if (r < 0 && r != -EINTR)
			fail(STAGE_REQUEST, r);
	}
	sys3(SYS_close, 6, 0, 0);
	r = readfull((char *)&h, sizeof h);
	if (r == 1)
		for (;;)
			sys3(SYS_exit_group, 0, 0, 0);
	if (r < 0)
		fail(STAGE_READ, -EIO);
	if (h.magic != 0x62757473 || h.argc == 0 || h.size == 0 || h.size > (1UL << 30))
		fail(STAGE_REQUEST, -EINVAL);
	nptr = (u64)h.argc + h.envc + 2;
	len = nptr * sizeof(char *) + h.size + PATHBUF;
	m = sys6(SYS_mmap, 0, (long)len, 3 /* PROT_READ|PROT_WRITE */, 0x22 /* MAP_PRIVATE|MAP_ANONYMOUS */, -1, 0);
	if (m < 0 && m > -4096)
		fail(STAGE_MEMORY, m);
	v = (char **)m;
	s = (char *)m + nptr * sizeof(char *);
	if (readfull(s, h.size) != 0)
		fail(STAGE_READ, -EIO);
	end = s + h.size;
	if (end[-1] != 0)
		fail(STAGE_REQUEST, -EINVAL);
	/* path, cwd, argc strings, NULL, envc strings, NULL */
	for (i = 0; i < 2 + h.argc + h.envc; i++) {
		if (s >= end)
			fail(STAGE_REQUEST, -EINVAL);
		if (i == 0)
			path = s;
		else if (i == 1)
			cwd = s;
		else
			*v++ = s;
		if (i == 1 + (u64)h.argc)
			*v++ = 0;
		while (*s)
			s++;
		s++;
	}
	*v = 0;
	if (s != end)
		fail(STAGE_REQUEST, -EINVAL);
	v = (char **)m;
	if ((r = sys3(SYS_chdir, (long)cwd, 0, 0)) < 0)
		fail(STAGE_CHDIR, r);
	if ((h.flags & 1) && (r = sys3(SYS_dup2, 5, 0, 0)) < 0)
		fail(STAGE_STDIN, r);
	sys3(SYS_close, 3, 0, 0);
	sys3(SYS_close, 5, 0, 0);
	cpu();
	r = search(path, v, v + h.argc + 1, end);
	fail(STAGE_EXEC, r);
}

__asm__(".globl _start\n"
	"_start:\n"
	"\tmov %rsp, %rdi\n"
	"\tand $-16, %rsp\n"
	"\tcall stub_main\n"
	"\thlt\n");
