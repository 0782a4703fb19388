//go:build !dryexec_nocel

package policy

import (
	"context"
	"fmt"
	"reflect"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"

	"github.com/dryexec/dryexec"
)

// compiledRule is a Rule with its CEL program.
type compiledRule struct {
	Rule
	prg cel.Program
}

// celEnv declares `delta` as the StateDelta Go type itself, with its JSON field
// names, so that rules are type-checked when the policy is compiled (a typo in a
// field name is a policy error, not a rule that never fires) and fields are read
// lazily from the Go values (no copy of a 10,000-file delta per rule).
func celEnv() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[dryexec.StateDelta](), ext.ParseStructTag("json")),
		cel.Variable("delta", cel.ObjectType("dryexec.StateDelta")),
		ext.Strings(),
	)
}

func compileRules(rules []Rule) ([]compiledRule, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("policy: building the CEL environment: %w", err)
	}
	out := make([]compiledRule, 0, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		if r.Name == "" {
			r.Name = fmt.Sprintf("#%d", i+1)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%w: rule %q: two rules have that name", ErrInvalid, r.Name)
		}
		seen[r.Name] = true
		switch r.Result {
		case Block, Review, Allow:
		case "":
			return nil, fmt.Errorf("%w: rule %q: result is missing (block, review or allow)", ErrInvalid, r.Name)
		default:
			return nil, fmt.Errorf("%w: rule %q: result %q is not block, review or allow", ErrInvalid, r.Name, r.Result)
		}
		if r.Expr == "" {
			return nil, fmt.Errorf("%w: rule %q: expr is empty", ErrInvalid, r.Name)
		}
		if r.Reason == "" {
			r.Reason = r.Expr
		}
		ast, iss := env.Compile(r.Expr)
		if iss.Err() != nil {
			return nil, fmt.Errorf("%w: rule %q: %v", ErrInvalid, r.Name, iss.Err())
		}
		if !ast.OutputType().IsExactType(types.BoolType) {
			return nil, fmt.Errorf("%w: rule %q: expr yields %s, not bool", ErrInvalid, r.Name, ast.OutputType())
		}
		prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(1000))
		if err != nil {
			return nil, fmt.Errorf("%w: rule %q: %v", ErrInvalid, r.Name, err)
		}
		out = append(out, compiledRule{Rule: r, prg: prg})
	}
	return out, nil
}

// checkRules evaluates every rule in order and returns the name of the first
// allow rule that fired ("" if none). A rule that cannot be evaluated counts as
// firing if it is a block or review rule (fail closed) and as not firing if it
// is an allow rule; either way a reason says so.
func (e *Engine) checkRules(ctx context.Context, d *dryexec.StateDelta, fs *facts) (allowedBy string) {
	vars := map[string]any{"delta": d}
	for _, r := range e.rules {
		out, _, err := r.prg.ContextEval(ctx, vars)
		fired, ok := false, false
		if err == nil {
			fired, ok = out.Value().(bool)
			if !ok {
				err = fmt.Errorf("yielded %v, not a bool", out)
			}
		}
		if err != nil {
			if r.Result == Allow {
				fs.add(EffectInfo, "rule %s could not be evaluated (%v); it does not allow anything", r.Name, err)
				continue
			}
			fs.add(Effect(r.Result), "rule %s could not be evaluated (%v); counted as firing: %s", r.Name, err, r.Reason)
			continue
		}
		if !fired {
			continue
		}
		fs.add(Effect(r.Result), "rule %s: %s", r.Name, r.Reason)
		if r.Result == Allow && allowedBy == "" {
			allowedBy = r.Name
		}
	}
	return allowedBy
}
