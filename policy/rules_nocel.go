//go:build dryexec_nocel

package policy

import (
	"context"
	"fmt"

	"github.com/dryexec/dryexec"
)

// A build with the dryexec_nocel tag leaves CEL out (cmd/dryexec-local: its
// package initialisation and the binary's size are most of what such a
// process pays before main, docs/architecture.md). It decides with every
// built-in check exactly as the full build does; a policy with rules, which
// only --policy files and daemons' policies have, is refused when compiled.
type compiledRule struct{ Rule }

func compileRules(rules []Rule) ([]compiledRule, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("%w: rules are CEL expressions, and this build of dryexec leaves CEL out (the full CLI, dryexec-engine, has it)", ErrInvalid)
}

// checkRules has no rules to check: compileRules took none.
func (e *Engine) checkRules(context.Context, *dryexec.StateDelta, *facts) string { return "" }
