// Package policy owns dryexec's decision engine: the policy (an "environment" in
// the seeds' words) a caller states, and the verdict on a StateDelta it yields —
// auto_commit, review or block, a deterministic risk score in [0,1] and a reason
// a person can read for every fact that contributed.
//
// A Policy is plain data with the same shape in Go, JSON and YAML (Load, Parse).
// Compile checks it once (patterns, CEL rules, weights); the Engine it returns
// decides any number of deltas, concurrently. docs/decision.md is the user's
// description of the rules, the default policy, the score formula and the
// external scorer protocol.
package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dryexec/dryexec"
)

// ErrInvalid is wrapped by every error about a policy itself (bad file, bad
// pattern, a CEL rule that does not compile), as opposed to a failure deciding.
var ErrInvalid = errors.New("invalid policy")

// Choices of a decision, strongest first.
const (
	Block      = "block"
	Review     = "review"
	AutoCommit = "auto_commit"
	// Allow is a rule result: it waives the score threshold (see Rule).
	Allow = "allow"
)

// Policy is what may happen without a person looking. Its JSON and YAML forms
// use the json names below; Load starts from Default, so a file states only what
// it changes (a list given in a file replaces the default list).
type Policy struct {
	// Name labels the policy in reasons and logs (the seeds' Environment.name).
	Name string `json:"name,omitempty"`
	// AllowedMutationTargets: every changed path must match one of these globs,
	// else block. Absolute patterns are host paths; relative ones ("./build/**",
	// "build/**") are resolved against the action's working directory; "*" is
	// everything. Empty allows no file change at all.
	AllowedMutationTargets []string `json:"allowed_mutation_targets"`
	// DeniedMutationTargets: a changed path matching one of these blocks, even
	// if it is also allowed.
	DeniedMutationTargets []string `json:"denied_mutation_targets"`
	// ReviewWhen sends common risky shapes of change to review.
	ReviewWhen ReviewWhen `json:"review_when"`
	// Persistence lists the places where a file written now makes code run
	// later (shell startup files, PATH directories, services, schedulers,
	// hooks, editor and runtime startup files), by class. A change at one
	// (anything but a delete) goes to review, the class named in the reason.
	Persistence []PathClass `json:"persistence"`
	// SensitivePaths raise the risk score (factor "sensitive") when changed.
	SensitivePaths []string `json:"sensitive_paths"`
	// Violations tunes how the boundary's refusals count (default: all block).
	Violations Violations `json:"violations"`
	Limits     Limits     `json:"limits"`
	Network    Network    `json:"network"`
	Thresholds Thresholds `json:"thresholds"`
	Budgets    Budgets    `json:"budgets"`
	Weights    Weights    `json:"weights"`
	// Rules are CEL expressions over the delta (variable `delta`, JSON field
	// names), evaluated in order; every rule that yields true contributes.
	Rules []Rule `json:"rules"`
	// Scorer is an optional external scorer; nil: none.
	Scorer *Scorer `json:"scorer,omitempty"`
}

// ReviewWhen names built-in review checks; each true one sends a delta showing
// it to review, with the paths in the reason.
type ReviewWhen struct {
	// OutsideCwd: a change outside the action's working directory.
	OutsideCwd bool `json:"outside_cwd"`
	// Deletes: a delete or rmdir of something that exists on the host.
	Deletes bool `json:"deletes"`
	// SetID: a created or changed path with the setuid or setgid bit.
	SetID bool `json:"setid"`
	// PathDirs: a created or changed path directly in a directory of the
	// action's PATH (its absolute entries): a command name would run it.
	PathDirs bool `json:"path_dirs"`
}

// Violations: every violation blocks, except those whose kind (syscall, path,
// network, limit, secret, …) is listed in ReviewKinds, which go to review — for
// programs whose harmless probes the boundary refuses (a runtime trying
// io_uring and falling back). The default lists "secret": a read of a masked
// credential path was contained (the command saw it empty), and everyday tools
// read their configs (npm reads ~/.npmrc on every start); a person should know,
// nothing needs stopping. A policy that states review_kinds replaces the list.
type Violations struct {
	ReviewKinds []string `json:"review_kinds,omitempty"`
}

// Limits block a delta that exceeds them. A nil limit is no limit; 0 means
// none allowed.
type Limits struct {
	MaxBytesWritten *ByteSize `json:"max_bytes_written,omitempty"`
	MaxFilesChanged *int64    `json:"max_files_changed,omitempty"`
	MaxFilesDeleted *int64    `json:"max_files_deleted,omitempty"`
}

// Network judges the delta's network log (netsim decides what may leave; this
// decides what a person must see).
type Network struct {
	// MaxRequests blocks a delta with more requests (any action); nil: no limit.
	MaxRequests *int64 `json:"max_requests,omitempty"`
	// AllowedHosts: when set, a request (mocked, allowed or blocked) to a host
	// matching none blocks. Globs over host names ("*.example.com"); "*" is
	// every host. Empty: no restriction.
	AllowedHosts []string `json:"allowed_hosts,omitempty"`
	// DeniedHosts: a request to a matching host blocks, whatever netsim did
	// with it: the action meant to talk to that host.
	DeniedHosts []string `json:"denied_hosts,omitempty"`
	// ReviewEgress sends to review a delta in which netsim forwarded a request
	// to the real network (action "allowed").
	ReviewEgress bool `json:"review_egress"`
}

// Thresholds turn the final risk score into a choice.
type Thresholds struct {
	// ReviewAbove: a score strictly above it goes to review.
	ReviewAbove float64 `json:"review_above"`
	// BlockAbove: a score strictly above it blocks; nil: never.
	BlockAbove *float64 `json:"block_above,omitempty"`
}

// Budgets are what the score measures against: reaching a budget gives the
// factor its full weight.
type Budgets struct {
	BytesWritten    ByteSize `json:"bytes_written"`
	NetworkRequests int64    `json:"network_requests"`
	FilesDeleted    int64    `json:"files_deleted"`
}

// Weights of the risk score's factors (see Score). Each is ≥ 0; the score is
// their weighted sum, capped at 1.
type Weights struct {
	Bytes      float64 `json:"bytes"`
	Network    float64 `json:"network"`
	Deletes    float64 `json:"deletes"`
	Sensitive  float64 `json:"sensitive"`
	Violations float64 `json:"violations"`
	Failure    float64 `json:"failure"`
	// Secrets weighs reads of masked credential paths (kind "secret"), which
	// do not count as Violations: the read was contained.
	Secrets float64 `json:"secrets"`
}

// Rule is a CEL expression over the delta.
type Rule struct {
	Name string `json:"name"`
	// Expr must yield a bool, e.g. `size(delta.network) > 0` or
	// `delta.files.exists(f, f.path.endsWith(".sql"))`.
	Expr string `json:"expr"`
	// Result is what a true Expr means: block, review, or allow. An allow rule
	// waives the score threshold (review_above) and nothing else: blocks,
	// review rules, failures and schema breaches still count.
	Result string `json:"result"`
	// Reason is the text a person reads when the rule fires.
	Reason string `json:"reason"`
}

// Scorer is an external scorer, consulted only when the deterministic engine
// did not block. Exactly one of Command and URL is set.
//
// A model can be the scorer: a command that sends a summary of the delta to
// a model and prints the score it answers, exiting non-zero when it has none
// (the deterministic decision then stands). examples/model_scorer.py is one,
// worked through in docs/decision.md ("A model as the scorer"). Give it a
// TimeoutMS that covers a model's answer: the default is 2 s.
type Scorer struct {
	// Command is run (no shell) with the delta's JSON on stdin and must print a
	// score: a bare number or {"score": N}, N in [0,1].
	Command []string `json:"command,omitempty"`
	// URL receives the delta's JSON in a POST and must answer 200 with the
	// same body as Command prints.
	URL string `json:"url,omitempty"`
	// TimeoutMS bounds one consultation; 0: DefaultScorerTimeoutMS.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// DeterministicWeight and ExternalWeight blend the two scores (normalised
	// by their sum); both 0: 0.4 and 0.6.
	DeterministicWeight float64 `json:"deterministic_weight,omitempty"`
	ExternalWeight      float64 `json:"external_weight,omitempty"`
}

// DefaultScorerTimeoutMS bounds an external scorer when the policy does not.
const DefaultScorerTimeoutMS = 2000

// ByteSize is a number of bytes; in JSON and YAML it is a number or a string
// with a unit ("512KiB", "10MiB", "1GiB", "5MB").
type ByteSize int64

// UnmarshalJSON accepts a number or a string with a unit.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		n, err := ParseByteSize(s)
		if err != nil {
			return err
		}
		*b = n
		return nil
	}
	var f float64
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("a size is a number of bytes or a string like \"10MiB\": %s", data)
	}
	if f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return fmt.Errorf("size %s: want a whole number of bytes ≥ 0", data)
	}
	*b = ByteSize(f)
	return nil
}

// String formats b with a binary unit.
func (b ByteSize) String() string { return humanBytes(int64(b)) }

// ParseByteSize parses "123", "10KiB", "10MiB", "1GiB", "1TiB" or the decimal
// units "kB", "MB", "GB", "TB".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mul := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mul = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mul
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f*mul > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: want a number of bytes, optionally with a unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB)", s)
	}
	return ByteSize(f * mul), nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGT"[exp]) + "iB"
}

// Default is the policy used when the caller names none (docs/decision.md
// explains each choice): changes anywhere but the system and credential
// directories may be proposed, but only additive work inside the working
// directory, by a command that succeeded, with no real network egress and a low
// score, commits without a person.
func Default() Policy {
	maxBytes := ByteSize(1 << 30)
	maxChanged, maxDeleted, maxReq := int64(10000), int64(1000), int64(1000)
	return Policy{
		Name:                   "default",
		AllowedMutationTargets: []string{"*"},
		DeniedMutationTargets: []string{
			"/etc/**", "/boot/**", "/usr/**", "/bin/**", "/sbin/**", "/lib/**", "/lib32/**", "/lib64/**", "/libx32/**",
			"/proc/**", "/sys/**", "/dev/**", "/var/lib/**", "/var/spool/cron/**",
			"**/.ssh/**", "**/.gnupg/**", "**/.aws/**", "**/.azure/**", "**/.kube/**", "**/.docker/config.json",
			"**/.config/gcloud/**", "**/.password-store/**",
		},
		SensitivePaths: []string{
			"**/.env", "**/.env.*", "**/*.pem", "**/*.key", "**/*.p12", "**/id_rsa*", "**/id_ecdsa*", "**/id_ed25519*",
			"**/.netrc", "**/.npmrc", "**/.pypirc", "**/.git-credentials", "**/.git/config", "**/.git/hooks/**",
			"**/.bashrc", "**/.bash_profile", "**/.profile", "**/.zshrc", "**/.zprofile", "**/.config/fish/**",
			"**/.github/workflows/**", "**/.gitlab-ci.yml", "**/authorized_keys",
		},
		Limits:      Limits{MaxBytesWritten: &maxBytes, MaxFilesChanged: &maxChanged, MaxFilesDeleted: &maxDeleted},
		Network:     Network{MaxRequests: &maxReq, ReviewEgress: true},
		Thresholds:  Thresholds{ReviewAbove: 0.5},
		Budgets:     DefaultBudgets(),
		Weights:     DefaultWeights(),
		ReviewWhen:  ReviewWhen{OutsideCwd: true, Deletes: true, SetID: true, PathDirs: true},
		Violations:  Violations{ReviewKinds: []string{dryexec.ViolationSecret}},
		Persistence: DefaultPersistence(),
	}
}

// DefaultBudgets: 10 MiB written, 10 network requests, 10 files deleted.
func DefaultBudgets() Budgets {
	return Budgets{BytesWritten: 10 << 20, NetworkRequests: 10, FilesDeleted: 10}
}

// DefaultWeights: bytes and network weigh the same; a sensitive path alone
// exceeds the default review threshold; a violation alone reaches 1; a
// contained read of a masked credential path adds a modest 0.2.
func DefaultWeights() Weights {
	return Weights{Bytes: 0.25, Network: 0.25, Deletes: 0.2, Sensitive: 0.6, Violations: 1, Failure: 0.3, Secrets: 0.2}
}

// Parse reads a policy from JSON or YAML (YAML is a superset; both give the same
// shape), on top of Default. Unknown fields are an error, so that a typo does
// not silently weaken a policy.
func Parse(data []byte) (Policy, error) {
	return parseOnto(Default(), data)
}

func parseOnto(p Policy, data []byte) (Policy, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Policy{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if doc == nil {
		return p, nil
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return Policy{}, fmt.Errorf("%w: the document must be a mapping of policy fields", ErrInvalid)
	}
	// A list given replaces the default's. encoding/json would decode a list
	// of structs into the elements already there, so that an entry the file
	// leaves a field out of would keep the default entry's value.
	if _, ok := m["persistence"]; ok {
		p.Persistence = nil
	}
	if _, ok := m["rules"]; ok {
		p.Rules = nil
	}
	// YAML → generic → JSON → Policy keeps one set of field names and lets the
	// JSON decoder refuse unknown fields.
	j, err := json.Marshal(doc)
	if err != nil {
		return Policy{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return p, nil
}

// Load reads a policy file (JSON or YAML) on top of Default.
func Load(file string) (Policy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Policy{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	p, err := Parse(b)
	if err != nil {
		return Policy{}, fmt.Errorf("%s: %w", filepath.Base(file), err)
	}
	return p, nil
}
