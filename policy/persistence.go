package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/dryexec/dryexec"
)

// PathClass is one kind of place where a file written now makes code run
// later, without anyone running the command that wrote it again: a shell
// startup file, a directory on PATH, a service unit, a git hook. A change at
// one of Paths goes to review with Class in the reason.
type PathClass struct {
	// Class names the place for a person: "shell startup file".
	Class string `json:"class"`
	// Paths are globs as for the targets, except that a relative pattern is
	// refused (whose working directory would make it persistent?) and "~/"
	// is allowed: it stands for the action's home (HOME in its environment),
	// or for any usual home (/home/*, /root, /Users/*, /var/home/*) when the
	// action has no absolute HOME.
	Paths []string `json:"paths"`
}

// DefaultPersistence is the default policy's list of persistence places,
// grouped by the mechanism that runs them. The aim is the class, not the
// examples: every common shell, init system, scheduler, editor and language
// runtime that reads a file at its start and executes what it says.
func DefaultPersistence() []PathClass {
	return []PathClass{
		{"shell startup file", []string{
			// bash, sh (dash, busybox), ksh, mksh (ENV), zsh, tcsh/csh, fish; system-wide ones too.
			"**/.bashrc", "**/.bash_profile", "**/.bash_login", "**/.bash_logout", "**/.bash_aliases", "**/.bashrc.d/**",
			"**/.bash_completion", "**/.bash_completion.d/**", "**/.local/share/bash-completion/**",
			"**/.profile", "**/.shrc", "**/.kshrc", "**/.mkshrc",
			"**/.zshrc", "**/.zshenv", "**/.zprofile", "**/.zlogin", "**/.zlogout", "**/.zshrc.d/**", "**/.config/zsh/**", "**/.oh-my-zsh/custom/**",
			"**/.tcshrc", "**/.cshrc", "**/.login", "**/.logout",
			"**/.config/fish/**", "**/.local/share/fish/vendor_*.d/**",
			"**/.pam_environment", "**/.config/environment.d/**",
			"/etc/profile", "/etc/profile.d/**", "/etc/bash.bashrc", "/etc/bash.bash_logout", "/etc/bashrc", "/etc/environment",
			"/etc/zsh/**", "/etc/zshenv", "/etc/zshrc", "/etc/zprofile", "/etc/zlogin", "/etc/csh.cshrc", "/etc/csh.login",
			"/etc/fish/**", "/etc/ksh.kshrc", "/etc/mkshrc", "/etc/bash_completion.d/**", "/etc/environment.d/**",
		}},
		{"directory on PATH", []string{
			// A login shell's ~/.profile puts these first on PATH once they
			// exist, so creating them is enough; review_when.path_dirs covers
			// every other directory of the action's PATH.
			"~/.local/bin/**", "~/bin/**",
		}},
		{"systemd unit", []string{
			"**/.config/systemd/**", "**/.local/share/systemd/**", "/etc/systemd/**", "/run/systemd/system/**", "/run/systemd/user/**",
			"/lib/systemd/**", "/usr/lib/systemd/**", "/usr/local/lib/systemd/**",
		}},
		{"init script", []string{"/etc/init.d/**", "/etc/rc.local", "/etc/rc*.d/**", "/etc/init/**", "**/.config/upstart/**"}},
		{"launchd job", []string{"**/Library/LaunchAgents/**", "**/Library/LaunchDaemons/**", "/Library/StartupItems/**"}},
		{"cron, anacron or at job", []string{
			"/etc/cron*/**", "/etc/anacrontab", "/var/spool/cron/**", "/var/spool/anacron/**", "/var/spool/at/**", "/var/spool/atjobs/**",
			"/usr/lib/cron/tabs/**", "/private/var/at/**",
		}},
		{"desktop autostart entry", []string{
			"**/.config/autostart/**", "**/.config/autostart-scripts/**", "**/.config/plasma-workspace/env/**",
			"**/.config/plasma-workspace/shutdown/**", "**/.kde/Autostart/**", "**/.kde4/Autostart/**", "/etc/xdg/autostart/**",
			// A launcher or D-Bus service that shadows an application's runs
			// when the user (or the desktop) starts it.
			"**/.local/share/applications/**", "**/.local/share/dbus-1/services/**",
		}},
		{"X session file", []string{
			"**/.xsessionrc", "**/.xsession", "**/.xprofile", "**/.xinitrc", "**/.xserverrc", "**/.Xsession",
			"/etc/X11/Xsession", "/etc/X11/Xsession.d/**", "/etc/X11/xinit/**", "/etc/X11/xinitrc",
		}},
		{"git config or hook", []string{
			"**/.gitconfig", "**/.config/git/**", "/etc/gitconfig",
			"**/.git/config", "**/.git/config.worktree", "**/.git/hooks/**", "**/.git/modules/**/config", "**/.git/modules/**/hooks/**",
			"**/.git/worktrees/*/config.worktree",
			// Common core.hooksPath targets and hook managers' files.
			"**/.githooks/**", "**/.git-hooks/**", "**/.husky/**", "**/.pre-commit-config.yaml", "**/lefthook.yml", "**/.lefthook.yml",
		}},
		{"direnv file", []string{"**/.envrc", "**/.env", "**/.direnvrc", "**/.config/direnv/**"}},
		{"ssh login file", []string{
			"**/.ssh/authorized_keys", "**/.ssh/authorized_keys2", "**/.ssh/config", "**/.ssh/rc", "**/.ssh/environment",
			"/etc/ssh/sshrc", "/etc/ssh/sshd_config", "/etc/ssh/sshd_config.d/**", "/etc/ssh/ssh_config", "/etc/ssh/ssh_config.d/**",
		}},
		{"editor or IDE startup file", []string{
			"**/.vimrc", "**/.gvimrc", "**/.exrc", "**/.vim/**", "**/.config/nvim/**", "**/.local/share/nvim/site/**",
			"**/.emacs", "**/.emacs.el", "**/.emacs.d/init.el", "**/.emacs.d/early-init.el", "**/.emacs.d/elpa/**",
			"**/.emacs.d/lisp/**", "**/.emacs.d/site-lisp/**", "**/.config/emacs/**", "**/.doom.d/**", "**/.spacemacs", "**/.dir-locals.el",
			"**/.vscode/tasks.json", "**/.vscode/settings.json", "**/.vscode/extensions/**", "**/.vscode-server/extensions/**",
			"**/.config/Code/User/**", "**/.code-workspace", "**/*.code-workspace",
			"/etc/vim/**", "/etc/vimrc", "/etc/xdg/nvim/**",
			"**/.gdbinit", "**/.lldbinit", "**/.tmux.conf", "**/.config/tmux/**", "**/.screenrc",
		}},
		{"Python startup file", []string{
			"**/site-packages/*.pth", "**/dist-packages/*.pth", "**/sitecustomize.py", "**/usercustomize.py",
			"**/.pythonrc", "**/.pythonrc.py", "**/.ipython/*/startup/**", "**/.ipython/*/ipython_config.py", "**/.jupyter/*_config.py",
		}},
		{"package manager hook", []string{
			// npm's node-options and script-shell, pip's and yarn's configs
			// name programs that run on their next use.
			"**/.npmrc", "**/.yarnrc", "**/.yarnrc.yml", "**/.config/pip/**", "**/.pip/pip.conf", "/etc/pip.conf",
		}},
		{"dynamic loader config", []string{"/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.conf.d/**"}},
		{"sudo, PAM or login config", []string{
			"/etc/sudoers", "/etc/sudoers.d/**", "/etc/pam.d/**", "/etc/security/**", "/etc/doas.conf", "/etc/login.defs",
			"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/polkit-1/**", "/usr/share/polkit-1/rules.d/**",
		}},
		{"kernel module or udev config", []string{"/etc/modules", "/etc/modules-load.d/**", "/etc/modprobe.d/**", "/etc/udev/rules.d/**"}},
	}
}

// anyHomes stand for "~/" when the action has no absolute HOME: every usual
// place of a home directory (Linux, root's, macOS, Fedora Silverblue's).
var anyHomes = []string{"/home/*/", "/root/", "/Users/*/", "/var/home/*/"}

// persistSet is a policy's persistence classes compiled. "~/" patterns are
// compiled twice: once beneath a stand-in home "/~" (a path beneath the
// action's HOME is rewritten to it before matching), once beneath each of
// anyHomes for actions without an absolute HOME.
type persistSet struct {
	class            []string // per class
	home, noHome     *globSet
	homeOf, noHomeOf []int // pattern index → class index
}

func compilePersistence(classes []PathClass) (*persistSet, error) {
	ps := &persistSet{}
	var home, noHome []string
	for ci, c := range classes {
		if strings.TrimSpace(c.Class) == "" {
			return nil, fmt.Errorf("%w: persistence[%d]: class is empty", ErrInvalid, ci)
		}
		if len(c.Paths) == 0 {
			return nil, fmt.Errorf("%w: persistence %q: no paths", ErrInvalid, c.Class)
		}
		ps.class = append(ps.class, c.Class)
		for _, p := range c.Paths {
			h, n := p, []string{p}
			switch {
			case strings.HasPrefix(p, "~/"):
				h, n = "/~/"+p[2:], nil
				for _, anyHome := range anyHomes {
					n = append(n, anyHome+p[2:])
				}
			case !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "**/"):
				return nil, fmt.Errorf("%w: persistence %q: pattern %q must be absolute, **/… or ~/…", ErrInvalid, c.Class, p)
			}
			home = append(home, h)
			ps.homeOf = append(ps.homeOf, ci)
			for _, x := range n {
				noHome = append(noHome, x)
				ps.noHomeOf = append(ps.noHomeOf, ci)
			}
		}
	}
	var err error
	if ps.home, err = compileGlobs("persistence", home, ""); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if ps.noHome, err = compileGlobs("persistence", noHome, ""); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return ps, nil
}

// actionHome is the action's HOME when it is a clean absolute path other
// than "/", else "".
func actionHome(d *dryexec.StateDelta) string {
	h := d.Action.Env["HOME"]
	if !cleanAbs(h) || h == "/" {
		return ""
	}
	return h
}

// pathDirs lists the absolute directories of the action's PATH, cleaned.
// Relative entries ("", ".") name whatever directory a later shell is in, not
// a place on the host, and are skipped.
func pathDirs(d *dryexec.StateDelta) map[string]bool {
	out := map[string]bool{}
	for _, e := range strings.Split(d.Action.Env["PATH"], ":") {
		if strings.HasPrefix(e, "/") {
			if e = path.Clean(e); e != "/" {
				out[e] = true
			}
		}
	}
	return out
}

// checkPersistence sends to review every change (but a delete: removing a
// file makes nothing run) at a place where code runs later, one reason per
// class naming the class and the pattern.
func (e *Engine) checkPersistence(d *dryexec.StateDelta, fs *facts) {
	ps := e.persist
	var dirs map[string]bool
	if e.p.ReviewWhen.PathDirs {
		dirs = pathDirs(d)
	}
	if (ps == nil || len(ps.class) == 0) && len(dirs) == 0 {
		return
	}
	home := actionHome(d)
	var byClass []examples
	if ps != nil {
		byClass = make([]examples, len(ps.class))
	}
	var onPath examples
	segs := make([]string, 0, 16)
	// A read error is checkFiles' reason to block: the same changes.
	_ = d.EachFile(func(f *dryexec.FileChange) error {
		if f.Op == dryexec.OpDelete || f.Op == dryexec.OpRmdir || !cleanAbs(f.Path) {
			return nil // deletes and unclean paths have reasons of their own
		}
		p := f.Path
		if len(dirs) > 0 && (dirs[p[:max(strings.LastIndexByte(p, '/'), 1)]] || dirs[p]) {
			onPath.add(p) // p is clean and absolute: its parent is up to the last slash
		}
		if ps == nil {
			return nil
		}
		set, of, q := ps.noHome, ps.noHomeOf, p
		if home != "" {
			set, of = ps.home, ps.homeOf
			if beneath(p, home) {
				q = "/~" + p[len(home):]
			}
		}
		segs = splitPath(q, segs[:0])
		if g := set.firstIndex(q, segs); g >= 0 {
			src := set.gs[g].src
			if strings.HasPrefix(src, "/~/") {
				src = "~/" + src[3:]
			}
			byClass[of[g]].add(p + " (" + src + ")")
			return nil
		}
		if q != p {
			// Beneath home, but an absolute or **/ pattern may still hold
			// the real path (the stand-in only serves ~/ patterns).
			segs = splitPath(p, segs[:0])
			if g := set.firstIndex(p, segs); g >= 0 {
				byClass[of[g]].add(p + " (" + set.gs[g].src + ")")
			}
		}
		return nil
	})
	for ci := range byClass {
		if byClass[ci].n > 0 {
			fs.add(EffectReview, "writes a %s, where code runs later without being asked: %s", ps.class[ci], byClass[ci].String())
		}
	}
	if onPath.n > 0 {
		fs.add(EffectReview, "writes into a directory on the action's PATH (review_when.path_dirs), where a command name runs it later: %s", onPath.String())
	}
}
