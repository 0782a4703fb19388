/*
 * The small front of dryexec (package internal/smallfront): bin/dryexec as
 * `make build` installs it on linux/amd64. A user's `dryexec run -- CMD`
 * with a daemon running is a trial of a few milliseconds, and a Go process
 * alone takes longer than that to start here; this program starts in about
 * the time of /bin/true. It decides nothing itself: it sends its arguments,
 * environment, working directory and which of stdout/stderr are terminals
 * to the daemon (POST /v1/front, upgraded to a framed stream), where the
 * Go front's own code (internal/front.Serve) reads them exactly as the Go
 * front would, and it copies back what that code writes and the exit code.
 * Whatever the daemon does not take — another command, a flag the Go front
 * leaves to the engine, an old daemon — it hands, before anything was
 * written, to the Go front beside it (dryexec-front), with the same
 * arguments, environment and signal mask, which then does exactly what
 * bin/dryexec always did; a `run` that no daemon listens for, or with --via
 * local, goes to the local engine beside it (dryexec-local) as the Go front
 * would send it there.
 *
 * Written without libc, as the command stub is (guest/cmdstub/stub.c), so
 * that it is a static binary of a few kilobytes with nothing to set up.
 *
 * Protocol (server/front.go has the other end): the request's body is
 * records of one tag byte, a string and a NUL: 'a' an argument after the
 * program's name, 'e' an environment entry, 'c' the working directory, 't'
 * the terminals ("o" stdout, "e" stderr). The daemon answers 101 and then
 * frames of one type byte and a 4-byte little-endian length: 'o' stdout
 * bytes, 'e' stderr bytes, 'x' the exit code (4 bytes), 'F' "not mine":
 * hand over to the Go front (only ever before any 'o' or 'e'). This end
 * sends one byte per signal: 'I' SIGINT, 'T' SIGTERM; the daemon then ends
 * the trial as an interrupted Go front does and says so.
 *
 * Build: `make stub` (gcc, x86-64), which regenerates
 * internal/smallfront/elf_amd64.go.
 */

typedef unsigned long u64;
typedef unsigned int u32;

enum { SYS_read = 0, SYS_write = 1, SYS_close = 3, SYS_poll = 7, SYS_rt_sigprocmask = 14, SYS_ioctl = 16,
       SYS_socket = 41, SYS_connect = 42, SYS_execve = 59, SYS_getcwd = 79, SYS_readlink = 89,
       SYS_exit_group = 231, SYS_signalfd4 = 289 };
enum { EINTR = 4, EAGAIN = 11 };
enum { SIGINT = 2, SIGTERM = 15 };
enum { AF_UNIX = 1, SOCK_STREAM = 1, SOCK_CLOEXEC = 02000000, SFD_CLOEXEC = 02000000 };
enum { POLLIN = 1, POLLOUT = 4, POLLHUP = 16, POLLERR = 8 };
enum { TCGETS = 0x5401 };
enum { REQMAX = 4 << 20, PATHMAX = 4096, SUNPATH = 108 };

static long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static long sys4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}

static __attribute__((noreturn)) void quit(int code)
{
	for (;;)
		sys3(SYS_exit_group, code, 0, 0);
}

static u64 len(const char *s)
{
	u64 n = 0;
	while (s[n])
		n++;
	return n;
}

static int eq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static char **envp;

/* get is getenv: the first entry of the name, as Go's os.Getenv reads it. */
static const char *get(const char *name)
{
	for (char **e = envp; *e; e++) {
		const char *p = *e, *n = name;
		while (*n && *p == *n)
			p++, n++;
		if (!*n && *p == '=')
			return p + 1;
	}
	return 0;
}

static int set(const char *name)
{
	const char *v = get(name);
	return v && *v;
}

/* put writes all of b to fd; -1 once fd refuses (the rest is dropped). */
static int put(int fd, const char *b, u64 n)
{
	while (n > 0) {
		long r = sys3(SYS_write, fd, (long)b, n);
		if (r == -EINTR)
			continue;
		if (r == -EAGAIN) { /* a non-blocking stream the caller gave us */
			struct { int fd; short events, revents; } p = { fd, POLLOUT, 0 };
			sys3(SYS_poll, (long)&p, 1, -1);
			continue;
		}
		if (r <= 0)
			return -1;
		b += r, n -= r;
	}
	return 0;
}

static void say(const char *s) { put(2, s, len(s)); }

static char buf[REQMAX];  /* the request, then what the daemon sends */
static char path[PATHMAX];
static char **argv0;
static u64 oldmask;
static int masked;

/*
 * besides execs the program name in this program's directory (its real
 * path, as /proc/self/exe has it) with the arguments, environment and
 * signal mask this program was given; it returns the exec's error (-errno).
 */
static long besides(const char *name)
{
	if (masked) {
		sys4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&oldmask, 0, 8);
		masked = 0;
	}
	u64 nl = len(name) + 1;
	long n = sys3(SYS_readlink, (long)"/proc/self/exe", (long)path, PATHMAX - nl - 1);
	if (n <= 0) {
		path[0] = 0;
		return -2;
	}
	while (n > 0 && path[n - 1] != '/')
		n--;
	for (u64 i = 0; i < nl; i++)
		path[n + i] = name[i];
	return sys3(SYS_execve, (long)path, (long)argv0, (long)envp);
}

/* handover execs the Go front beside this program, or says why it cannot. */
static __attribute__((noreturn)) void handover(void)
{
	long r = besides("dryexec-front");
	if (!path[0]) {
		say("dryexec: this program's own path is unknown (/proc/self/exe)\n");
		quit(125);
	}
	say("dryexec: starting ");
	say(path);
	say(r == -2 ? ": no such file (`make build` installs it beside this front)\n" : ": exec failed\n");
	quit(125);
}

/*
 * local is handover for a `run` no daemon takes (none listens, or --via
 * local): the local engine beside this program (dryexec-local, which hands
 * what it does not run itself to the engine), as the Go front would choose
 * it (cmd/dryexec-front: not when $DRYEXEC_ENGINE names the engine), one
 * process start sooner; the Go front where there is none.
 */
static __attribute__((noreturn)) void local(void)
{
	if (!set("DRYEXEC_ENGINE"))
		besides("dryexec-local");
	handover();
}

static char *at;  /* the end of the request in buf */

static void add(char tag, const char *s)
{
	u64 n = len(s);
	if ((u64)(buf + REQMAX - at) < n + 2)
		handover(); /* more than the request may hold: the Go front's */
	*at++ = tag;
	for (u64 i = 0; i < n; i++)
		at[i] = s[i];
	at += n;
	*at++ = 0;
}

static int terminal(int fd)
{
	char t[64];
	return sys3(SYS_ioctl, fd, TCGETS, (long)t) == 0;
}

/* cat appends s to path at *n; 0 when it does not fit a socket's address. */
static int cat(u64 *n, const char *s)
{
	u64 l = len(s);
	if (*n + l >= SUNPATH)
		return 0;
	for (u64 i = 0; i < l; i++)
		path[*n + i] = s[i];
	*n += l;
	path[*n] = 0;
	return 1;
}

/* socketPath is internal/apiclient.Dial's socket: $DRYEXEC_SOCKET, else
 * $XDG_RUNTIME_DIR/dryexec.sock, else HOME's serve/dryexec.sock, with HOME
 * dryexec.DefaultHome's. 0 when none can be named. */
static int socketPath(void)
{
	u64 n = 0;
	if (set("DRYEXEC_SOCKET"))
		return cat(&n, get("DRYEXEC_SOCKET"));
	if (set("XDG_RUNTIME_DIR"))
		return cat(&n, get("XDG_RUNTIME_DIR")) && cat(&n, "/dryexec.sock");
	int ok;
	if (set("DRYEXEC_HOME"))
		ok = cat(&n, get("DRYEXEC_HOME"));
	else if (set("XDG_STATE_HOME"))
		ok = cat(&n, get("XDG_STATE_HOME")) && cat(&n, "/dryexec");
	else if (set("HOME"))
		ok = cat(&n, get("HOME")) && cat(&n, "/.local/state/dryexec");
	else
		return 0;
	return ok && cat(&n, "/serve/dryexec.sock");
}

static const char head[] = "POST /v1/front HTTP/1.1\r\nHost: dryexec\r\nConnection: Upgrade\r\n"
			   "Upgrade: dryexec-front/1\r\nContent-Type: application/octet-stream\r\nContent-Length: ";

__attribute__((used)) void front_main(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	argv0 = argv;
	envp = argv + argc + 1;

	if (argc < 2 || !eq(argv[1], "run") || set("DRYEXEC_URL"))
		handover();
	/* --via local never goes to a daemon: spare it the connection. */
	if (get("DRYEXEC_VIA") && eq(get("DRYEXEC_VIA"), "local"))
		local();
	for (int i = 2; i < argc && !eq(argv[i], "--"); i++)
		if (eq(argv[i], "--via=local") || (eq(argv[i], "--via") && i + 1 < argc && eq(argv[i + 1], "local")))
			local();
	if (!socketPath())
		handover();

	/* The body first, behind room for the head. */
	char *body = buf + 512;
	at = body;
	for (int i = 1; i < argc; i++)
		add('a', argv[i]);
	for (char **e = envp; *e; e++)
		add('e', *e);
	static char wd[PATHMAX];
	if (sys3(SYS_getcwd, (long)wd, PATHMAX, 0) > 0)
		add('c', wd);
	char tty[3], *t = tty;
	if (terminal(1))
		*t++ = 'o';
	if (terminal(2))
		*t++ = 'e';
	*t = 0;
	add('t', tty);

	u64 size = at - body, hl = sizeof head - 1;
	char num[24], *p = num + sizeof num;
	*--p = 0;
	*--p = '\n', *--p = '\r', *--p = '\n', *--p = '\r';
	do
		*--p = '0' + size % 10;
	while (size /= 10);
	u64 nl = len(p);
	char *start = body - hl - nl;
	for (u64 i = 0; i < hl; i++)
		start[i] = head[i];
	for (u64 i = 0; i < nl; i++)
		start[hl + i] = p[i];

	long s = sys3(SYS_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		handover();
	struct { unsigned short family; char path[SUNPATH]; } addr;
	addr.family = AF_UNIX;
	u64 pl = len(path);
	for (u64 i = 0; i <= pl; i++)
		addr.path[i] = path[i];
	if (sys3(SYS_connect, s, (long)&addr, 2 + pl + 1) < 0) {
		sys3(SYS_close, s, 0, 0);
		local(); /* no daemon listens there */
	}

	/* Ctrl-C and SIGTERM from here on are the daemon's to act on. */
	u64 sigs = (1UL << (SIGINT - 1)) | (1UL << (SIGTERM - 1));
	if (sys4(SYS_rt_sigprocmask, 0 /* SIG_BLOCK */, (long)&sigs, (long)&oldmask, 8) == 0)
		masked = 1;
	long sfd = sys4(SYS_signalfd4, -1, (long)&sigs, 8, SFD_CLOEXEC);
	if (sfd < 0 || put(s, start, at - start) < 0)
		handover();

	/* The answer's head: 101, or the Go front's to handle. The daemon
	 * sends it as soon as it has read the request; one that does not
	 * within a second is wedged, as apiclient.Dial's first answer must
	 * come within one too: the Go front then decides (closing the
	 * connection stops anything the daemon may yet start). */
	u64 have = 0, hend = 0;
	while (!hend) {
		if (have == 4096)
			handover();
		struct { int fd; short events, revents; } hp = { (int)s, POLLIN, 0 };
		long w = sys3(SYS_poll, (long)&hp, 1, 1000);
		if (w == -EINTR)
			continue;
		if (w <= 0)
			handover();
		long r = sys3(SYS_read, s, (long)buf + have, 4096 - have);
		if (r == -EINTR)
			continue;
		if (r <= 0)
			handover();
		have += r;
		for (u64 i = 3; i < have; i++)
			if (buf[i - 3] == '\r' && buf[i - 2] == '\n' && buf[i - 1] == '\r' && buf[i] == '\n') {
				hend = i + 1;
				break;
			}
	}
	static const char up[] = "HTTP/1.1 101 ";
	for (u64 i = 0; i < sizeof up - 1; i++)
		if (buf[i] != up[i])
			handover();

	/* Frames, as they come. */
	u64 pos = hend;
	char type = 0;
	u32 left = 0;       /* payload bytes of the current frame still to come */
	char hdr[5];
	int hn = 0, code = 0, cn = 0, shown = 0;
	int dead[3] = { 0, 0, 0 };
	for (;;) {
		while (pos < have) {
			if (hn < 5) {
				hdr[hn++] = buf[pos++];
				if (hn < 5)
					continue;
				type = hdr[0];
				left = (u32)(unsigned char)hdr[1] | (u32)(unsigned char)hdr[2] << 8 |
				       (u32)(unsigned char)hdr[3] << 16 | (u32)(unsigned char)hdr[4] << 24;
				if (type == 'F' && !shown)
					handover();
				if (type == 'x')
					code = 0, cn = 0;
				if (left > 0)
					continue;
			} else {
				u64 n = have - pos;
				if (n > left)
					n = left;
				if (type == 'o' || type == 'e') {
					int fd = type == 'o' ? 1 : 2;
					shown = 1;
					if (!dead[fd] && put(fd, buf + pos, n) < 0)
						dead[fd] = 1;
				} else if (type == 'x') {
					for (u64 i = 0; i < n; i++, cn++)
						if (cn < 4)
							code |= (int)(unsigned char)buf[pos + i] << (8 * cn);
				}
				pos += n, left -= n;
				if (left > 0)
					continue;
			}
			if (type == 'x')
				quit(code & 0xff);
			hn = 0;
		}
		pos = have = 0;
		struct { int fd; short events, revents; } pf[2] = { { (int)s, POLLIN, 0 }, { (int)sfd, POLLIN, 0 } };
		long r = sys3(SYS_poll, (long)pf, 2, -1);
		if (r == -EINTR)
			continue;
		if (r < 0)
			break;
		if (pf[1].revents & POLLIN) {
			u32 si[32]; /* struct signalfd_siginfo: ssi_signo first */
			if (sys3(SYS_read, sfd, (long)si, sizeof si) == sizeof si) {
				char c = si[0] == SIGTERM ? 'T' : 'I';
				put(s, &c, 1);
			}
		}
		if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = sys3(SYS_read, s, (long)buf, REQMAX);
			if (r == -EINTR || r == -EAGAIN)
				continue;
			if (r <= 0)
				break;
			have = r;
		}
	}
	/* Not handed over: the trial may have started, and must not run twice. */
	say("dryexec: the daemon closed the connection before the trial's end\n");
	quit(125);
}

__asm__(".globl _start\n"
	"_start:\n"
	"\tmov %rsp, %rdi\n"
	"\tand $-16, %rsp\n"
	"\tcall front_main\n"
	"\thlt\n");
