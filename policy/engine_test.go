package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/deltatest"
)

// baseDelta: one small file created in the working directory by a command
// that succeeded — the default policy's auto_commit case.
func baseDelta() *dryexec.StateDelta {
	d := &dryexec.StateDelta{
		Action:  dryexec.Action{Argv: []string{"sh", "-c", "true"}, Cwd: "/w"},
		Process: dryexec.Process{ExitCode: 0},
		Files:   []dryexec.FileChange{{Path: "/w/a.txt", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 10, Mode: "0644"}},
	}
	d.Normalize()
	d.ComputeTotals()
	return d
}

func ptr[T any](v T) *T { return &v }

func file(p string, op dryexec.Op) dryexec.FileChange {
	return dryexec.FileChange{Path: p, Op: op, Kind: dryexec.KindFile, Size: 10, Mode: "0644"}
}

// TestPrecedence walks every step of block > review > auto_commit and checks
// the choice and the reason each fact gives.
func TestPrecedence(t *testing.T) {
	net := func(host, action string) dryexec.NetworkEvent {
		return dryexec.NetworkEvent{Proto: "https", Method: "GET", URL: "https://" + host + "/x", Host: host, Port: 443, Action: action}
	}
	tests := []struct {
		name    string
		policy  func(*Policy)
		delta   func(*dryexec.StateDelta)
		want    string
		reasons []string // substrings, each must appear in some reason
	}{
		// auto_commit
		{"clean", nil, nil, AutoCommit, []string{"info: nothing needs a person"}},
		{"allowed star", func(p *Policy) { p.AllowedMutationTargets = []string{"*"} }, nil, AutoCommit, nil},
		{"mocked network is fine", nil, func(d *dryexec.StateDelta) { d.Network = append(d.Network, net("api.x", "mocked")) }, AutoCommit,
			[]string{"risk: +0.025 1 network request (budget 10)", "risk 0.025 is at most 0.50"}},
		{"egress not reviewed when switched off", func(p *Policy) { p.Network.ReviewEgress = false },
			func(d *dryexec.StateDelta) { d.Network = append(d.Network, net("api.x", "allowed")) }, AutoCommit, nil},

		// block
		{"incomplete", nil, func(d *dryexec.StateDelta) {
			d.Incomplete, d.IncompleteReason = true, "the guest supervisor died (killed) mid-trial"
		}, Block, []string{"block: the delta is incomplete: the guest supervisor died (killed) mid-trial"}},
		{"incomplete whatever the rules allow", func(p *Policy) { p.AllowedMutationTargets = []string{"*"}; p.Thresholds.ReviewAbove = 1 },
			func(d *dryexec.StateDelta) { d.Incomplete = true }, Block, []string{"block: the delta is incomplete"}},
		{"violation", nil, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "syscall", Detail: "mount(2) refused", Exe: "/bin/mount"})
		}, Block, []string{"block: the boundary refused something (syscall violation): mount(2) refused (/bin/mount)", "risk: +1.00 1 violation"}},
		{"violation kind sent to review", func(p *Policy) { p.Violations.ReviewKinds = []string{"syscall"} }, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "syscall", Detail: "io_uring_setup refused"})
		}, Review, []string{"review: the boundary refused something (syscall violation, review_kinds): io_uring_setup refused"}},
		{"other violation kinds still block", func(p *Policy) { p.Violations.ReviewKinds = []string{"syscall"} }, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "secret", Detail: "/root/.ssh/id_rsa"})
		}, Block, []string{"block: the boundary refused something (secret violation): /root/.ssh/id_rsa"}},
		{"masked read is contained: review, modest risk, by default", nil, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "secret", Detail: "/root/.npmrc"})
		}, Review, []string{"review: read masked credential paths (contained: the command saw them empty; review_kinds): /root/.npmrc",
			"risk: +0.20 1 read of a masked credential path (contained)"}},
		{"masked read beside a refused syscall still blocks", nil, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "secret", Detail: "/root/.npmrc"},
				dryexec.Violation{Kind: "syscall", Detail: "mount(2) refused"})
		}, Block, []string{"block: the boundary refused something (syscall violation): mount(2) refused", "review: read masked credential paths"}},
		{"masked read blocks when review_kinds leaves it out", func(p *Policy) { p.Violations.ReviewKinds = nil }, func(d *dryexec.StateDelta) {
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "secret", Detail: "/root/.npmrc"})
		}, Block, []string{"block: the boundary refused something (secret violation): /root/.npmrc"}},
		{"denied target", nil, func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/etc/passwd", dryexec.OpModify)) }, Block,
			[]string{"block: touches a denied target: /etc/passwd (/etc/**)"}},
		// Commit sets a touched path's mtime on the host: in a denied
		// target (or outside the allowed ones) that is a write there.
		{"touched denied target", nil, func(d *dryexec.StateDelta) {
			d.Touched = append(d.Touched, dryexec.FileChange{Path: "/etc/hostname", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Mode: "0644"})
		}, Block, []string{"block: touches a denied target: /etc/hostname (/etc/**, mtime only)"}},
		{"touched outside the allowed targets", func(p *Policy) { p.AllowedMutationTargets = []string{"/w/**"} }, func(d *dryexec.StateDelta) {
			d.Touched = append(d.Touched, dryexec.FileChange{Path: "/srv/x", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Mode: "0644"})
		}, Block, []string{"changes outside the allowed targets (/w/**): /srv/x (mtime only)"}},
		// Making build/x touches the dir that holds build/: no write of
		// its own outside build/**.
		{"touched parent dir of the allowed targets", func(p *Policy) { p.AllowedMutationTargets = []string{"/w/build/**"} }, func(d *dryexec.StateDelta) {
			d.Files = []dryexec.FileChange{file("/w/build/x", dryexec.OpCreate)}
			d.Touched = append(d.Touched, dryexec.FileChange{Path: "/w", Op: dryexec.OpTouch, Kind: dryexec.KindDir, Mode: "0755"})
		}, AutoCommit, nil},
		{"touched in the allowed targets", nil, func(d *dryexec.StateDelta) {
			d.Touched = append(d.Touched, dryexec.FileChange{Path: "/w/x", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Mode: "0644"})
		}, AutoCommit, nil},
		{"denied beats allowed", func(p *Policy) { p.DeniedMutationTargets = []string{"/w/a.txt"} }, nil, Block, []string{"denied target: /w/a.txt"}},
		{"outside allowed targets", func(p *Policy) { p.AllowedMutationTargets = []string{"./build/**"} }, nil, Block,
			[]string{"block: changes outside the allowed targets (./build/**): /w/a.txt"}},
		{"no allowed targets", func(p *Policy) { p.AllowedMutationTargets = nil }, nil, Block, []string{"allows no file changes"}},
		{"many outside are summarised", func(p *Policy) { p.AllowedMutationTargets = []string{"/nowhere/**"} }, func(d *dryexec.StateDelta) {
			for _, n := range []string{"b", "c", "d", "e"} {
				d.Files = append(d.Files, file("/w/"+n, dryexec.OpCreate))
			}
		}, Block, []string{"/w/a.txt, /w/b, /w/c and 2 more"}},
		{"max bytes", func(p *Policy) { p.Limits.MaxBytesWritten = ptr(ByteSize(5)) }, nil, Block,
			[]string{"block: limit: writes 10 B, more than max_bytes_written 5 B"}},
		{"max files changed", func(p *Policy) { p.Limits.MaxFilesChanged = ptr(int64(0)) }, nil, Block,
			[]string{"block: limit: changes 1 path, more than max_files_changed 0"}},
		{"max files deleted", func(p *Policy) { p.Limits.MaxFilesDeleted = ptr(int64(0)) },
			func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/w/old", dryexec.OpDelete)) }, Block,
			[]string{"block: limit: deletes 1 path, more than max_files_deleted 0"}},
		{"max network requests", func(p *Policy) { p.Network.MaxRequests = ptr(int64(1)) }, func(d *dryexec.StateDelta) {
			d.Network = append(d.Network, net("a", "mocked"), net("b", "mocked"))
		}, Block, []string{"block: limit: 2 network requests, more than network.max_requests 1"}},
		{"denied host, even blocked by netsim", func(p *Policy) { p.Network.DeniedHosts = []string{"*.prod.internal"} },
			func(d *dryexec.StateDelta) { d.Network = append(d.Network, net("DB.prod.internal", "blocked")) }, Block,
			[]string{"block: talks to a denied host: https GET https://DB.prod.internal/x (blocked)"}},
		{"host outside allowed hosts", func(p *Policy) { p.Network.AllowedHosts = []string{"api.x"} },
			func(d *dryexec.StateDelta) {
				d.Network = append(d.Network, net("api.x", "mocked"), net("evil.y", "mocked"))
			}, Block,
			[]string{"block: talks to a host outside network.allowed_hosts (api.x): https GET https://evil.y/x (mocked)"}},
		{"block rule", func(p *Policy) {
			p.Rules = []Rule{{Name: "no-curl", Expr: `delta.action.argv.exists(a, a == "curl")`, Result: Block, Reason: "curl is not allowed"}}
		}, func(d *dryexec.StateDelta) { d.Action.Argv = []string{"curl", "x"} }, Block, []string{"block: rule no-curl: curl is not allowed"}},
		{"block rule that cannot be evaluated fails closed", func(p *Policy) {
			p.Rules = []Rule{{Name: "env", Expr: `delta.action.env["TOKEN"] == "x"`, Result: Block, Reason: "token"}}
		}, nil, Block, []string{"block: rule env could not be evaluated", "counted as firing: token"}},
		{"path with .. cannot slip into an allowed target", func(p *Policy) { p.AllowedMutationTargets = []string{"/w/build/**"} },
			func(d *dryexec.StateDelta) {
				d.Files = []dryexec.FileChange{file("/w/build/../src/x", dryexec.OpCreate)}
			}, Block,
			[]string{`block: paths that are not absolute and clean: "/w/build/../src/x"`}},
		{"relative path", nil, func(d *dryexec.StateDelta) { d.Files = []dryexec.FileChange{file("x", dryexec.OpCreate)} }, Block,
			[]string{`not absolute and clean: "x"`}},
		{"relative pattern without a cwd", func(p *Policy) { p.AllowedMutationTargets = []string{"build/**"} },
			func(d *dryexec.StateDelta) { d.Action.Cwd = "" }, Block, []string{"block: the policy cannot be applied"}},
		{"block threshold", func(p *Policy) { p.Thresholds.BlockAbove = ptr(0.2) },
			func(d *dryexec.StateDelta) { d.Files[0].Path = "/w/.env" }, Block, []string{"block: risk 0.60 is above the block threshold 0.20"}},
		{"block wins over review", nil, func(d *dryexec.StateDelta) {
			d.Process.ExitCode = 1
			d.Violations = append(d.Violations, dryexec.Violation{Kind: "limit", Detail: "upper full"})
		}, Block, []string{"block: the boundary refused", "review: the command failed: exit code 1"}},

		// review
		{"review rule", func(p *Policy) {
			p.Rules = []Rule{{Name: "net", Expr: "size(delta.network) > 0", Result: Review, Reason: "uses the network"}}
		}, func(d *dryexec.StateDelta) { d.Network = append(d.Network, net("api.x", "mocked")) }, Review, []string{"review: rule net: uses the network"}},
		{"review rule quiet when false", func(p *Policy) {
			p.Rules = []Rule{{Name: "net", Expr: "size(delta.network) > 0", Result: Review, Reason: "uses the network"}}
		}, nil, AutoCommit, nil},
		{"review rule that cannot be evaluated fails closed", func(p *Policy) {
			p.Rules = []Rule{{Name: "env", Expr: `delta.action.env["HOME"] == "/root"`, Result: Review, Reason: "root"}}
		}, nil, Review, []string{"review: rule env could not be evaluated"}},
		{"schema breach", nil, func(d *dryexec.StateDelta) {
			ev := net("api.x", "mocked")
			ev.SchemaBreach = true
			d.Network = append(d.Network, ev)
		}, Review, []string{"review: requests that break the mocked API's schema: https GET https://api.x/x (mocked)"}},
		{"real egress", nil, func(d *dryexec.StateDelta) { d.Network = append(d.Network, net("api.x", "allowed")) }, Review,
			[]string{"review: requests forwarded to the real network: https GET https://api.x/x (allowed)"}},
		{"command failed", nil, func(d *dryexec.StateDelta) { d.Process.ExitCode = 3 }, Review,
			[]string{"review: the command failed: exit code 3", "risk: +0.30 the command failed"}},
		{"timed out", nil, func(d *dryexec.StateDelta) { d.Process.ExitCode, d.Process.TimedOut = 124, true }, Review,
			[]string{"review: the command failed: it timed out"}},
		{"signal", nil, func(d *dryexec.StateDelta) { d.Process.ExitCode, d.Process.Signal = 137, "SIGKILL" }, Review,
			[]string{"review: the command failed: killed by signal SIGKILL"}},
		{"outside cwd", nil, func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/tmp/x", dryexec.OpCreate)) }, Review,
			[]string{"review: changes outside the working directory /w: /tmp/x"}},
		{"a sibling with the cwd as prefix is outside", nil, func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/wx/y", dryexec.OpCreate)) }, Review,
			[]string{"outside the working directory /w: /wx/y"}},
		{"deletes", nil, func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/w/old", dryexec.OpDelete)) }, Review,
			[]string{"review: deletes what exists on the host: /w/old", "risk: +0.02 deletes 1 path (budget 10)"}},
		{"setuid", nil, func(d *dryexec.StateDelta) { d.Files[0].Mode = "4755" }, Review, []string{"review: sets a setuid or setgid bit: /w/a.txt (4755)"}},
		{"setgid", nil, func(d *dryexec.StateDelta) { d.Files[0].Mode = "2755" }, Review, []string{"setuid or setgid"}},
		{"chown to another user in the cwd", nil, func(d *dryexec.StateDelta) { d.Files[0] = chownOf("/w/a.txt", 0, 0, 65534, 0) }, Review,
			[]string{"review: changes the owner of /w/a.txt (0:0 → 65534:0)"}},
		{"chgrp to root in the cwd", nil, func(d *dryexec.StateDelta) { d.Files[0] = chownOf("/w/a.txt", 1000, 1000, 1000, 0) }, Review,
			[]string{"review: changes the owner of /w/a.txt (1000:1000 → 1000:0)"}},
		{"chgrp in the cwd by the same user", nil, func(d *dryexec.StateDelta) { d.Files[0] = chownOf("/w/a.txt", 1000, 1000, 1000, 1001) },
			AutoCommit, nil},
		{"chgrp outside the cwd, outside_cwd off", func(p *Policy) { p.ReviewWhen.OutsideCwd = false },
			func(d *dryexec.StateDelta) { d.Files = append(d.Files, chownOf("/tmp/x", 1000, 1000, 1000, 1001)) }, Review,
			[]string{"review: changes the owner of /tmp/x (1000:1000 → 1000:1001)"}},
		{"a unix socket commit cannot create", nil, func(d *dryexec.StateDelta) {
			s := file("/w/sock", dryexec.OpCreate)
			s.Kind, s.SHA256 = dryexec.KindOther, ""
			d.Files = append(d.Files, s)
		}, Review, []string{"review: commit cannot create a unix socket or device node: /w/sock"}},
		{"sticky is not setid", nil, func(d *dryexec.StateDelta) { d.Files[0].Mode = "1777" }, AutoCommit, nil},
		{"score above threshold (sensitive path)", nil, func(d *dryexec.StateDelta) { d.Files[0].Path = "/w/.env" }, Review,
			[]string{"risk: +0.60 changes sensitive paths: /w/.env (**/.env)", "review: risk 0.60 is above the review threshold 0.50"}},
		{"score above threshold (bytes and network)", func(p *Policy) { p.Thresholds.ReviewAbove = 0.45 }, func(d *dryexec.StateDelta) {
			d.Files[0].Size = 20 << 20
			d.Process.ExitCode = 0
			for range 11 {
				d.Network = append(d.Network, net("api.x", "mocked"))
			}
		}, Review, []string{"risk: +0.25 writes 20.0 MiB (budget 10.0 MiB)", "risk: +0.25 11 network requests (budget 10)", "review: risk 0.50 is above the review threshold 0.45"}},

		{"rule over the files", func(p *Policy) {
			p.Rules = []Rule{{Name: "no-scripts", Expr: `delta.files.exists(f, f.path.endsWith(".sh"))`, Result: Block, Reason: "writes a script"}}
		}, func(d *dryexec.StateDelta) { d.Files = append(d.Files, file("/w/x.sh", dryexec.OpCreate)) }, Block,
			[]string{"block: rule no-scripts: writes a script"}},

		// allow rules
		{"allow rule waives the threshold", func(p *Policy) {
			p.Rules = []Rule{{Name: "cert-ok", Expr: `delta.files.all(f, f.path == "/w/test.pem")`, Result: Allow, Reason: "the project's test certificate"}}
		}, func(d *dryexec.StateDelta) { d.Files[0].Path = "/w/test.pem" }, AutoCommit,
			[]string{"allow: rule cert-ok: the project's test certificate", "info: risk 0.60 is above the review threshold 0.50, waived by rule cert-ok"}},
		{"allow rule does not waive persistence", func(p *Policy) {
			p.Rules = []Rule{{Name: "any", Expr: "true", Result: Allow, Reason: "all fine"}}
		}, func(d *dryexec.StateDelta) { d.Files[0].Path = "/w/.envrc" }, Review, []string{"review: writes a direnv file"}},
		{"allow rule does not waive a failure", func(p *Policy) {
			p.Rules = []Rule{{Name: "any", Expr: "true", Result: Allow, Reason: "all fine"}}
		}, func(d *dryexec.StateDelta) { d.Process.ExitCode = 2 }, Review, []string{"review: the command failed"}},
		{"allow rule does not waive a block", func(p *Policy) {
			p.Rules = []Rule{{Name: "any", Expr: "true", Result: Allow, Reason: "all fine"}}
		}, func(d *dryexec.StateDelta) { d.Files[0].Path = "/etc/x" }, Block, []string{"block: touches a denied target"}},
		{"allow rule that cannot be evaluated allows nothing", func(p *Policy) {
			p.Rules = []Rule{{Name: "env", Expr: `delta.action.env["X"] == "y"`, Result: Allow, Reason: "x"}}
		}, func(d *dryexec.StateDelta) { d.Files[0].Path = "/w/.env" }, Review,
			[]string{"info: rule env could not be evaluated", "it does not allow anything", "review: risk 0.60"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			if tt.policy != nil {
				tt.policy(&p)
			}
			e, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			d := baseDelta()
			if tt.delta != nil {
				tt.delta(d)
			}
			before := *d
			r := e.Decide(context.Background(), d)
			if r.Decision.Choice != tt.want {
				t.Errorf("choice %s, want %s; reasons:\n  %s", r.Decision.Choice, tt.want, strings.Join(r.Decision.Reasons, "\n  "))
			}
			all := strings.Join(r.Decision.Reasons, "\n")
			for _, want := range tt.reasons {
				if !strings.Contains(all, want) {
					t.Errorf("no reason contains %q; reasons:\n  %s", want, strings.Join(r.Decision.Reasons, "\n  "))
				}
			}
			if len(r.Decision.Reasons) == 0 {
				t.Error("a decision without a reason")
			}
			if r.Decision.RiskScore < 0 || r.Decision.RiskScore > 1 {
				t.Errorf("risk %v outside [0,1]", r.Decision.RiskScore)
			}
			if d.Decision.Choice != "" || d.Totals != before.Totals {
				t.Error("Decide modified the delta")
			}
			// The same delta with its changes spilled (a big trial's, read
			// back one at a time) gets the same decision, rules included.
			sp := deltatest.Spilled(d)
			rs := e.Decide(context.Background(), sp)
			if rs.Decision.Choice != r.Decision.Choice || rs.Decision.RiskScore != r.Decision.RiskScore ||
				strings.Join(rs.Decision.Reasons, "\n") != all {
				t.Errorf("spilled: %s %v\n  %s\nin memory: %s %v\n  %s", rs.Decision.Choice, rs.Decision.RiskScore,
					strings.Join(rs.Decision.Reasons, "\n  "), r.Decision.Choice, r.Decision.RiskScore, strings.Join(r.Decision.Reasons, "\n  "))
			}
			if !sp.Spilled() {
				t.Error("Decide took a spilled delta's changes into Files")
			}
		})
	}
}

// TestReasonsOrdered: blocks first, then reviews, allows, risk, scorer, info.
func TestReasonsOrdered(t *testing.T) {
	e, _ := Compile(Default())
	d := baseDelta()
	d.Process.ExitCode = 1
	d.Files = append(d.Files, file("/etc/x", dryexec.OpCreate), file("/w/.env", dryexec.OpCreate))
	r := e.Decide(context.Background(), d)
	rank := map[Effect]int{}
	for i, e := range effectOrder {
		rank[e] = i
	}
	for i := 1; i < len(r.Facts); i++ {
		if rank[r.Facts[i].Effect] < rank[r.Facts[i-1].Effect] {
			t.Fatalf("reasons out of order: %q", r.Decision.Reasons)
		}
	}
}

// TestScore checks the formula: min(1, Σ w·x), each x capped at 1, rounded to
// 4 decimals, configurable weights and budgets.
func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		policy func(*Policy)
		delta  func(*dryexec.StateDelta)
		want   float64
	}{
		{"tiny write", nil, nil, 0}, // 10 B of 10 MiB rounds to 0
		{"half the byte budget", nil, func(d *dryexec.StateDelta) { d.Files[0].Size = 5 << 20 }, 0.125},
		{"over the byte budget caps at the weight", nil, func(d *dryexec.StateDelta) { d.Files[0].Size = 1 << 30 }, 0.25},
		{"5 requests", nil, func(d *dryexec.StateDelta) {
			for range 5 {
				d.Network = append(d.Network, dryexec.NetworkEvent{Host: "a", Action: "mocked"})
			}
		}, 0.125},
		{"deletes", nil, func(d *dryexec.StateDelta) {
			for range 5 {
				d.Files = append(d.Files, file("/w/old", dryexec.OpDelete))
			}
		}, 0.1},
		{"failure", nil, func(d *dryexec.StateDelta) { d.Process.ExitCode = 1 }, 0.3},
		{"everything caps at 1", nil, func(d *dryexec.StateDelta) {
			d.Process.ExitCode = 1
			d.Violations = []dryexec.Violation{{Kind: "path"}}
		}, 1},
		{"a masked read is modest", nil, func(d *dryexec.StateDelta) {
			d.Violations = []dryexec.Violation{{Kind: "secret", Detail: "/root/.npmrc"}, {Kind: "secret", Detail: "/root/.netrc"}}
		}, 0.2},
		{"a masked read does not make a violation's 1", nil, func(d *dryexec.StateDelta) {
			d.Process.ExitCode = 1
			d.Violations = []dryexec.Violation{{Kind: "secret", Detail: "/root/.npmrc"}}
		}, 0.5},
		{"custom weights", func(p *Policy) { p.Weights = Weights{Failure: 0.9} }, func(d *dryexec.StateDelta) { d.Process.ExitCode = 1 }, 0.9},
		{"custom budget", func(p *Policy) { p.Budgets.BytesWritten = 20 }, nil, 0.125},
		{"zero weights mean the defaults", func(p *Policy) { p.Weights = Weights{} }, func(d *dryexec.StateDelta) { d.Process.ExitCode = 1 }, 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Default()
			if tt.policy != nil {
				tt.policy(&p)
			}
			e, err := Compile(p)
			if err != nil {
				t.Fatal(err)
			}
			d := baseDelta()
			if tt.delta != nil {
				tt.delta(d)
			}
			r := e.Decide(context.Background(), d)
			if r.Decision.RiskScore != tt.want || r.Deterministic != tt.want {
				t.Errorf("score %v, want %v (%q)", r.Decision.RiskScore, tt.want, r.Decision.Reasons)
			}
			// Deterministic: the same delta gives the same decision.
			if r2 := e.Decide(context.Background(), d); strings.Join(r2.Decision.Reasons, "|") != strings.Join(r.Decision.Reasons, "|") {
				t.Error("two decisions of one delta differ")
			}
		})
	}
}

// TestTotalsRecomputed: a delta that understates its totals does not slip
// under a limit.
func TestTotalsRecomputed(t *testing.T) {
	p := Default()
	p.Limits.MaxFilesDeleted = ptr(int64(0))
	e, _ := Compile(p)
	d := baseDelta()
	d.Files = append(d.Files, file("/w/old", dryexec.OpDelete))
	d.Totals = dryexec.Totals{} // lies
	if r := e.Decide(context.Background(), d); r.Decision.Choice != Block {
		t.Fatalf("choice %s: %q", r.Decision.Choice, r.Decision.Reasons)
	}
}

func TestApply(t *testing.T) {
	e, _ := Compile(Default())
	d := baseDelta()
	r := e.Apply(context.Background(), d)
	if d.Decision.Choice != AutoCommit || len(d.Decision.Reasons) != len(r.Facts) {
		t.Fatalf("decision %+v", d.Decision)
	}
}

func TestRulesSeeJSONNames(t *testing.T) {
	// Every part of the contract is reachable by its JSON name.
	exprs := []string{
		`delta.process.exit_code == 0`, `delta.process.timed_out == false`, `delta.action.cwd == "/w"`,
		`delta.files[0].op == "create"`, `delta.files[0].before_sha256 == ""`, `delta.totals.files_changed == 1`,
		`delta.totals.bytes_written == 10`, `size(delta.network) == 1 && delta.network[0].schema_breach`,
		`delta.network[0].bytes_in == 0`, `delta.memory.peak_rss_bytes == 0`, `size(delta.violations) == 0`,
		`delta.action.env["K"] == "v"`,
	}
	d := baseDelta()
	d.Action.Env["K"] = "v"
	d.Network = []dryexec.NetworkEvent{{Host: "a", SchemaBreach: true}}
	for _, x := range exprs {
		p := Default()
		p.Rules = []Rule{{Name: "r", Expr: x, Result: Block, Reason: "fired"}}
		e, err := Compile(p)
		if err != nil {
			t.Errorf("%s: %v", x, err)
			continue
		}
		if r := e.Decide(context.Background(), d); !strings.Contains(strings.Join(r.Decision.Reasons, "\n"), "rule r: fired") {
			t.Errorf("%s did not fire: %q", x, r.Decision.Reasons)
		}
	}
}

// chownOf is the chmod that moves p's owner from huid:hgid to uid:gid.
func chownOf(p string, huid, hgid, uid, gid int) dryexec.FileChange {
	f := file(p, dryexec.OpChmod)
	f.UID, f.GID = uid, gid
	f.SetBeforeOwner(huid, hgid)
	return f
}
