package cli

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
)

// policyCmd helps write policies: see the one in force, and try one on deltas
// already recorded, without running anything again.
func policyCmd(env Env, code *int) *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Show the effective policy, or try a policy on a stored trial or a delta file",
	}
	c.AddCommand(&cobra.Command{
		Use:   "show [FILE]",
		Short: "Print the policy in force as JSON: the default, or FILE on top of it (checked)",
		Args:  usage(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, _, err := loadPolicy(args)
			if err != nil {
				return err
			}
			return printJSON(env.Stdout, p)
		},
	})
	var file string
	var asJSON bool
	test := &cobra.Command{
		Use:   "test [--policy FILE] ID|DELTA.json|-",
		Short: "Decide a stored trial or a delta file again under a policy; exit like run (0, 3, 4, 5)",
		Long: "Decide a recorded delta again under --policy (default: the default policy) and print the\n" +
			"decision. Nothing runs and nothing is stored or signed: it is for writing policies.",
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var files []string
			if file != "" {
				files = []string{file}
			}
			_, engine, err := loadPolicy(files)
			if err != nil {
				return err
			}
			doc, _, err := readDelta(env, args[0])
			if err != nil {
				return err
			}
			var d dryexec.StateDelta
			if err := json.Unmarshal(doc, &d); err != nil {
				return usageError{fmt.Errorf("%s is not a StateDelta: %w", args[0], err)}
			}
			d.Receipt = dryexec.Receipt{} // a new decision voids the old signature
			engine.Apply(cmd.Context(), &d)
			*code = exitCode(&d)
			if asJSON {
				return printJSON(env.Stdout, d.Decision)
			}
			fmt.Fprintf(env.Stdout, "decision: %s (risk %.2f)\n", d.Decision.Choice, d.Decision.RiskScore)
			for _, r := range d.Decision.Reasons {
				// Reasons quote sandbox-controlled text (paths, details): never
				// let it reach the terminal raw.
				q := strconv.QuoteToGraphic(r)
				fmt.Fprintf(env.Stdout, "  - %s\n", q[1:len(q)-1])
			}
			return nil
		},
	}
	test.Flags().StringVar(&file, "policy", "", "the policy file to try (default: the default policy)")
	test.Flags().BoolVar(&asJSON, "json", false, "print the decision as JSON")
	c.AddCommand(test)
	return c
}

// loadPolicy returns the default policy, or files[0] on top of it, compiled.
// Any mistake is a usage error.
func loadPolicy(files []string) (policy.Policy, *policy.Engine, error) {
	p := policy.Default()
	if len(files) > 0 {
		var err error
		if p, err = policy.Load(files[0]); err != nil {
			return p, nil, usageError{err}
		}
	}
	e, err := policy.Compile(p)
	if err != nil {
		return p, nil, usageError{err}
	}
	return p, e, nil
}
