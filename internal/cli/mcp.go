package cli

import (
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec/mcpserver"
)

func mcpCmd(env Env) *cobra.Command {
	var opts mcpserver.Options
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve dryexec's tools to an MCP client over stdin/stdout",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			// stdout carries the protocol: logs go to stderr only.
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			svc, err := newService(env, log, 0, 0, 2, 1, vmPools{}, 0, "", "", nil)
			if err != nil {
				return err
			}
			defer svc.Close()
			return mcpserver.Run(cmd.Context(), svc, buildVersion(), opts, env.Stdin, env.Stdout)
		},
	}
	cmd.Flags().BoolVar(&opts.AllowForce, "allow-force", false, "let the client's force through (commit over a policy block or a host change); off, only a person overrides, with dryexec commit --force")
	return cmd
}
