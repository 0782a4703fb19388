package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/compare"
	"github.com/dryexec/dryexec/internal/localrun"
)

// compareCmd is `dryexec compare A B …`: stored trials from this install's
// store, or live sessions (se_…, by their diffs) through the daemon that
// holds them; side by side.
func compareCmd(env Env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "compare ID ID...",
		Short: "Show side by side what trials or session branches changed, alike and differently",
		Long: "Compares two or more stored trials (tr_…) or live sessions (se_…, by their diff: a branch's since its fork) " +
			"side by side: every path any of them changed, what each did to it, whether they did it alike, differently, or " +
			"only some of them did, and each one's decision. Sessions are read through the running daemon (dryexec serve).",
		Args: usage(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res *compare.Result
			sessions := false
			for _, a := range args {
				sessions = sessions || strings.HasPrefix(a, "se_")
			}
			if sessions {
				home, err := dryexec.DefaultHome(env.Getenv)
				if err != nil {
					return err
				}
				c, err := findDaemon(cmd.Context(), env, home)
				if err != nil {
					return fmt.Errorf("compare: sessions live in a daemon: %w", err)
				}
				res = new(compare.Result)
				if err := c.Call(cmd.Context(), "POST", "/v1/compare", map[string]any{"ids": args}, res); err != nil {
					return err
				}
			} else {
				s, err := localrun.StartStore(env)
				if err != nil {
					return err
				}
				var sides []compare.Side
				for _, id := range args {
					d, err := s.Load(id)
					if err != nil {
						return err
					}
					side, err := compare.FromDelta(d)
					if err != nil {
						return err
					}
					sides = append(sides, side)
				}
				res = compare.Compare(sides...)
			}
			if asJSON {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			return compare.Render(env.Stdout, res)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON (as the API's POST /v1/compare answers)")
	return c
}
