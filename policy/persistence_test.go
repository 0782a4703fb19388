package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// userDelta is what a normal user's `dryexec run` from $HOME records: cwd and
// HOME the same, a PATH with directories of the user's own ahead of the
// system's. So outside_cwd never fires, and only persistence can hold a write
// back.
func userDelta(paths ...string) *dryexec.StateDelta {
	d := &dryexec.StateDelta{
		Action: dryexec.Action{Argv: []string{"sh", "-c", "x"}, Cwd: "/home/u", Env: map[string]string{
			"HOME": "/home/u", "PATH": "/home/u/.cargo/bin:/home/u/go/bin:/opt/tools/bin:/usr/local/bin:/usr/bin:/bin:.:",
		}},
	}
	for _, p := range paths {
		d.Files = append(d.Files, file(p, dryexec.OpCreate))
	}
	d.Normalize()
	d.ComputeTotals()
	return d
}

// TestPersistenceNeverAutoCommits: a write to any place where code runs later
// is never auto_commit under the default policy, and the reason names the
// place's class and the path. The first seven are the red team's findings
// (each auto-committed at risk 0.00 before persistence existed); the rest
// cover each class by pattern.
func TestPersistenceNeverAutoCommits(t *testing.T) {
	tests := []struct{ path, class string }{
		// The red team's findings.
		{"/home/u/.local/bin/sudo", "directory on PATH"},
		{"/home/u/.gitconfig", "git config or hook"},
		{"/home/u/.bash_login", "shell startup file"},
		{"/home/u/.config/systemd/user/evil.service", "systemd unit"},
		{"/home/u/.config/autostart/evil.desktop", "desktop autostart entry"},
		{"/home/u/.envrc", "direnv file"},
		{"/home/u/.xsessionrc", "X session file"},
		// Shells.
		{"/home/u/.bashrc", "shell startup file"},
		{"/home/u/.bash_profile", "shell startup file"},
		{"/home/u/.bash_logout", "shell startup file"},
		{"/home/u/.bash_aliases", "shell startup file"},
		{"/home/u/.bash_completion", "shell startup file"},
		{"/home/u/.local/share/bash-completion/completions/git", "shell startup file"},
		{"/home/u/.profile", "shell startup file"},
		{"/home/u/.shrc", "shell startup file"},
		{"/home/u/.kshrc", "shell startup file"},
		{"/home/u/.mkshrc", "shell startup file"},
		{"/home/u/.zshrc", "shell startup file"},
		{"/home/u/.zshenv", "shell startup file"},
		{"/home/u/.zprofile", "shell startup file"},
		{"/home/u/.zlogin", "shell startup file"},
		{"/home/u/.zlogout", "shell startup file"},
		{"/home/u/.config/zsh/.zshrc", "shell startup file"},
		{"/home/u/.oh-my-zsh/custom/evil.zsh", "shell startup file"},
		{"/home/u/.tcshrc", "shell startup file"},
		{"/home/u/.cshrc", "shell startup file"},
		{"/home/u/.login", "shell startup file"},
		{"/home/u/.logout", "shell startup file"},
		{"/home/u/.config/fish/config.fish", "shell startup file"},
		{"/home/u/.config/fish/conf.d/evil.fish", "shell startup file"},
		{"/home/u/.config/fish/functions/ls.fish", "shell startup file"},
		{"/home/u/.pam_environment", "shell startup file"},
		{"/home/u/.config/environment.d/10-path.conf", "shell startup file"},
		{"/etc/profile.d/evil.sh", "shell startup file"},
		{"/etc/bash.bashrc", "shell startup file"},
		{"/etc/zsh/zshrc", "shell startup file"},
		{"/etc/environment", "shell startup file"},
		{"/root/.bashrc", "shell startup file"},
		// PATH: ~/bin and ~/.local/bin always, every absolute PATH entry.
		{"/home/u/bin/ls", "directory on PATH"},
		{"/home/u/.local/bin", "directory on PATH"},
		{"/home/u/.cargo/bin/git", "PATH"},
		{"/home/u/go/bin/sudo", "PATH"},
		{"/opt/tools/bin/make", "PATH"},
		// systemd, init, launchd, cron.
		{"/home/u/.config/systemd/user/default.target.wants/evil.service", "systemd unit"},
		{"/home/u/.local/share/systemd/user/evil.timer", "systemd unit"},
		{"/etc/systemd/system/evil.service", "systemd unit"},
		{"/run/systemd/system/evil.service", "systemd unit"},
		{"/etc/init.d/evil", "init script"},
		{"/etc/rc.local", "init script"},
		{"/etc/rc3.d/S99evil", "init script"},
		{"/home/u/Library/LaunchAgents/com.evil.plist", "launchd job"},
		{"/Library/LaunchDaemons/com.evil.plist", "launchd job"},
		{"/etc/crontab", "cron, anacron or at job"},
		{"/etc/cron.d/evil", "cron, anacron or at job"},
		{"/etc/cron.hourly/evil", "cron, anacron or at job"},
		{"/etc/anacrontab", "cron, anacron or at job"},
		{"/var/spool/cron/crontabs/u", "cron, anacron or at job"},
		{"/var/spool/anacron/cron.daily", "cron, anacron or at job"},
		{"/var/spool/at/a0001", "cron, anacron or at job"},
		{"/var/spool/cron/atjobs/a0001", "cron, anacron or at job"},
		// Desktop and X.
		{"/etc/xdg/autostart/evil.desktop", "desktop autostart entry"},
		{"/home/u/.config/plasma-workspace/env/evil.sh", "desktop autostart entry"},
		{"/home/u/.local/share/applications/firefox.desktop", "desktop autostart entry"},
		{"/home/u/.local/share/dbus-1/services/org.evil.service", "desktop autostart entry"},
		{"/home/u/.xprofile", "X session file"},
		{"/home/u/.xinitrc", "X session file"},
		{"/home/u/.xsession", "X session file"},
		{"/etc/X11/Xsession.d/99evil", "X session file"},
		// git.
		{"/home/u/.config/git/config", "git config or hook"},
		{"/etc/gitconfig", "git config or hook"},
		{"/home/u/src/app/.git/config", "git config or hook"},
		{"/home/u/src/app/.git/hooks/pre-commit", "git config or hook"},
		{"/home/u/src/app/.git/modules/lib/hooks/post-checkout", "git config or hook"},
		{"/home/u/src/app/.git/modules/lib/config", "git config or hook"},
		{"/home/u/src/app/.githooks/pre-push", "git config or hook"},
		{"/home/u/src/app/.husky/pre-commit", "git config or hook"},
		{"/home/u/src/app/.pre-commit-config.yaml", "git config or hook"},
		// direnv.
		{"/home/u/src/app/.envrc", "direnv file"},
		{"/home/u/src/app/.env", "direnv file"},
		{"/home/u/.config/direnv/direnvrc", "direnv file"},
		// ssh.
		{"/home/u/.ssh/authorized_keys", "ssh login file"},
		{"/home/u/.ssh/authorized_keys2", "ssh login file"},
		{"/home/u/.ssh/config", "ssh login file"},
		{"/home/u/.ssh/rc", "ssh login file"},
		{"/home/u/.ssh/environment", "ssh login file"},
		{"/etc/ssh/sshd_config.d/evil.conf", "ssh login file"},
		// Editors and IDEs.
		{"/home/u/.vimrc", "editor or IDE startup file"},
		{"/home/u/.vim/plugin/evil.vim", "editor or IDE startup file"},
		{"/home/u/.vim/pack/x/start/evil/plugin/evil.vim", "editor or IDE startup file"},
		{"/home/u/.exrc", "editor or IDE startup file"},
		{"/home/u/.config/nvim/init.lua", "editor or IDE startup file"},
		{"/home/u/.config/nvim/init.vim", "editor or IDE startup file"},
		{"/home/u/.local/share/nvim/site/plugin/evil.lua", "editor or IDE startup file"},
		{"/home/u/.emacs", "editor or IDE startup file"},
		{"/home/u/.emacs.d/init.el", "editor or IDE startup file"},
		{"/home/u/.emacs.d/early-init.el", "editor or IDE startup file"},
		{"/home/u/.config/emacs/init.el", "editor or IDE startup file"},
		{"/home/u/src/app/.dir-locals.el", "editor or IDE startup file"},
		{"/home/u/src/app/.vscode/tasks.json", "editor or IDE startup file"},
		{"/home/u/src/app/.vscode/settings.json", "editor or IDE startup file"},
		{"/home/u/.vscode/extensions/evil/extension.js", "editor or IDE startup file"},
		{"/home/u/.config/Code/User/settings.json", "editor or IDE startup file"},
		{"/home/u/.gdbinit", "editor or IDE startup file"},
		{"/home/u/.tmux.conf", "editor or IDE startup file"},
		// Python.
		{"/home/u/.local/lib/python3.11/site-packages/evil.pth", "Python startup file"},
		{"/usr/lib/python3/dist-packages/evil.pth", "Python startup file"},
		{"/home/u/src/app/.venv/lib/python3.11/site-packages/distutils-precedence.pth", "Python startup file"},
		{"/home/u/.local/lib/python3.11/site-packages/sitecustomize.py", "Python startup file"},
		{"/home/u/.local/lib/python3.11/site-packages/usercustomize.py", "Python startup file"},
		{"/home/u/.ipython/profile_default/startup/00-evil.py", "Python startup file"},
		// Package managers.
		{"/home/u/.npmrc", "package manager hook"},
		{"/home/u/.config/pip/pip.conf", "package manager hook"},
		// Loader, privileges, kernel.
		{"/etc/ld.so.preload", "dynamic loader config"},
		{"/etc/ld.so.conf.d/evil.conf", "dynamic loader config"},
		{"/etc/sudoers", "sudo, PAM or login config"},
		{"/etc/sudoers.d/evil", "sudo, PAM or login config"},
		{"/etc/pam.d/sshd", "sudo, PAM or login config"},
		{"/etc/modprobe.d/evil.conf", "kernel module or udev config"},
		{"/etc/udev/rules.d/99-evil.rules", "kernel module or udev config"},
	}
	e, err := Compile(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.path, "/"), func(t *testing.T) {
			d := userDelta(tt.path)
			r := e.Decide(context.Background(), d)
			if r.Decision.Choice == AutoCommit {
				t.Fatalf("auto_commit at risk %.2f; reasons:\n  %s", r.Decision.RiskScore, strings.Join(r.Decision.Reasons, "\n  "))
			}
			found := false
			for _, reason := range r.Decision.Reasons {
				found = found || (strings.HasPrefix(reason, "review: writes") && strings.Contains(reason, tt.class) && strings.Contains(reason, tt.path))
			}
			if !found {
				t.Fatalf("no review reason naming %q and %s:\n  %s", tt.class, tt.path, strings.Join(r.Decision.Reasons, "\n  "))
			}
		})
	}
}

// TestPersistenceNotOverbroad: ordinary work in a project, a deleted startup
// file (nothing runs because of a removal) and look-alike names stay out of
// the persistence reasons.
func TestPersistenceNotOverbroad(t *testing.T) {
	e, err := Compile(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/home/u/src/app/main.go", "/home/u/src/app/bin/tool", "/home/u/src/app/model.pth", "/home/u/notes/bashrc-tips.md",
		"/home/u/src/app/.env.example.md.txt", "/home/u/.cache/pip/http/x", "/home/u/.local/share/recently-used.xbel",
		"/home/u/.cargo/bin/sub/x", "/home/u/src/app/.vscode/launch.json",
	} {
		d := userDelta(p)
		r := e.Decide(context.Background(), d)
		for _, reason := range r.Decision.Reasons {
			if strings.Contains(reason, "where code runs later") || strings.Contains(reason, "on the action's PATH") {
				t.Errorf("%s: %s", p, reason)
			}
		}
	}
	d := userDelta()
	d.Files = []dryexec.FileChange{file("/home/u/.bashrc", dryexec.OpDelete)}
	for _, reason := range e.Decide(context.Background(), d).Decision.Reasons {
		if strings.Contains(reason, "where code runs later") {
			t.Errorf("a delete counted as persistence: %s", reason)
		}
	}
}

// TestPersistenceHome: "~/" patterns follow the action's HOME; without one
// they match beneath any usual home (fail closed).
func TestPersistenceHome(t *testing.T) {
	e, err := Compile(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		home, path string
		want       bool
	}{
		{"/home/u", "/home/u/bin/ls", true},
		{"/home/u", "/home/v/bin/ls", false}, // another user's ~/bin is not this action's PATH
		{"/root", "/root/bin/ls", true},
		{"/root", "/root/.local/bin/sudo", true},
		{"", "/home/v/bin/ls", true},
		{"", "/root/bin/ls", true},
		{"", "/Users/v/.local/bin/ls", true},
		{"", "/srv/app/bin/ls", false},
		{"relative", "/home/v/.local/bin/ls", true},
	} {
		d := userDelta(tt.path)
		d.Action.Env = map[string]string{"HOME": tt.home}
		got := false
		for _, reason := range e.Decide(context.Background(), d).Decision.Reasons {
			got = got || strings.Contains(reason, "directory on PATH")
		}
		if got != tt.want {
			t.Errorf("HOME=%q %s: persistence %v, want %v", tt.home, tt.path, got, tt.want)
		}
	}
}

// TestPersistencePolicyErrors: a class needs a name and paths, and a relative
// pattern is refused.
func TestPersistencePolicyErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"persistence: [{class: x, paths: [bin/*]}]":  "must be absolute",
		"persistence: [{class: '', paths: [/a]}]":    "class is empty",
		"persistence: [{class: x}]":                  "no paths",
		"persistence: [{class: x, paths: ['/a/[']}]": "bad segment",
	} {
		p, err := Parse([]byte(doc))
		if err == nil {
			_, err = Compile(p)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", doc, err, want)
		}
	}
}
