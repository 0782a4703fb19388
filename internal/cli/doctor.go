package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec/rung"
)

func doctorCmd(env Env, code *int) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Say which rungs this host can run, and what is missing for the others",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st := rung.Doctor(cmd.Context())
			if asJSON {
				return printJSON(env.Stdout, st)
			}
			for _, s := range st {
				if s.Available {
					fmt.Fprintf(env.Stdout, "%-9s ok\n", s.Name)
					for _, n := range s.Notes {
						fmt.Fprintf(env.Stdout, "%-9s %s\n", "", n)
					}
				} else {
					fmt.Fprintf(env.Stdout, "%-9s unavailable: %s\n", s.Name, s.Missing)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return c
}
