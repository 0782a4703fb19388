package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/localrun"
)

// imagesCmd is `dryexec images pull|ls|rm|prune`: the image cache under
// $DRYEXEC_HOME/images (docs/images.md).
func imagesCmd(env Env, code *int) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Pull, list and remove the OCI images sandboxes can start from",
		Args:  usage(cobra.NoArgs),
	}
	var platform string
	pull := &cobra.Command{
		Use:   "pull REF",
		Short: "Fetch an image and unpack its layers into the cache",
		Long: `Fetch an image and unpack its layers into the cache. REF is a registry
reference (alpine:3.20, ghcr.io/org/img@sha256:…), oci:DIR[:TAG|@DIGEST],
oci-archive:FILE[:TAG|@DIGEST] or docker-archive:FILE[:REPO:TAG].
Registry credentials come from the docker config ($DOCKER_CONFIG or
~/.docker/config.json) and its credential helpers.`,
		Args: usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openImages(env)
			if err != nil {
				return imageErr(env, code, err)
			}
			opts := image.PullOptions{}
			if platform != "" {
				p, err := v1.ParsePlatform(platform)
				if err != nil {
					return usageError{fmt.Errorf("--platform %q: %w", platform, err)}
				}
				opts.Platform = p
			}
			var bar *progressBar
			if localrun.IsTTY(env.Stderr) {
				bar = &progressBar{w: env.Stderr}
				opts.Progress = bar.update
			}
			res, err := c.Pull(cmd.Context(), args[0], opts)
			bar.end()
			if err != nil {
				return imageErr(env, code, err)
			}
			fmt.Fprintf(env.Stdout, "%s %s (%s, %d layers, %d unpacked now)\n", args[0], res.Digest, res.Platform, len(res.Layers), res.Unpacked)
			if res.Skipped > 0 {
				fmt.Fprintf(env.Stderr, "dryexec: %d device nodes in the image were not created (a sandbox has its own /dev)\n", res.Skipped)
			}
			return nil
		},
	}
	pull.Flags().StringVar(&platform, "platform", "", "os/arch[/variant] to pull (default linux/"+image.DefaultPlatform().Architecture+")")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the cached images",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openImages(env)
			if err != nil {
				return imageErr(env, code, err)
			}
			imgs, err := c.List()
			if err != nil {
				return err
			}
			if asJSON {
				if imgs == nil {
					imgs = []image.Image{}
				}
				return printJSON(env.Stdout, imgs)
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tDIGEST\tPLATFORM\tLAYERS\tSIZE\tPULLED")
			for _, img := range imgs {
				names := img.Names
				if len(names) == 0 {
					names = []string{"<none>"}
				}
				dg := strings.TrimPrefix(img.Digest, "sha256:")[:12]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", strings.Join(names, ", "), dg, img.Platform, len(img.Layers),
					humanSize(c.DiskUsage(img)), img.Pulled.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm REF|DIGEST...",
		Short: "Remove names or images from the cache, and the layers no other image uses",
		Args:  usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openImages(env)
			if err != nil {
				return imageErr(env, code, err)
			}
			for _, a := range args {
				img, err := c.Remove(cmd.Context(), a)
				if err != nil {
					return imageErr(env, code, err)
				}
				fmt.Fprintf(env.Stdout, "removed %s (%s)\n", a, img.Digest)
			}
			return nil
		},
	}
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove layers no cached image uses and what interrupted pulls left",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := openImages(env)
			if err != nil {
				return imageErr(env, code, err)
			}
			rep, err := c.Prune(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "removed %d layers (%s) and %d leftovers\n", rep.Layers, humanSize(rep.Bytes), rep.Tmp)
			return nil
		},
	}
	cmd.AddCommand(pull, ls, rm, prune)
	return cmd
}

// openImages opens the cache in $DRYEXEC_HOME/images (the home by
// dryexec.DefaultHome's rules).
func openImages(env Env) (*image.Cache, error) {
	home, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return nil, err
	}
	return image.Open(filepath.Join(home, "images"), slog.New(slog.DiscardHandler))
}

// imageErr maps the cache's errors to exit codes: the caller's mistake (a
// reference that does not parse) is a usage error; an image that cannot be
// had (missing, refused, wrong platform, bad content) is refused, not a
// failure of dryexec.
func imageErr(env Env, code *int, err error) error {
	switch {
	case errors.Is(err, image.ErrBadReference):
		return usageError{err}
	case errors.Is(err, image.ErrNotFound), errors.Is(err, image.ErrUnauthorized), errors.Is(err, image.ErrPlatformNotFound),
		errors.Is(err, image.ErrBadDigest), errors.Is(err, image.ErrUnsupportedMediaType), errors.Is(err, image.ErrUnsafeLayer),
		errors.Is(err, image.ErrUnsupportedHost):
		fmt.Fprintln(env.Stderr, "dryexec:", err)
		*code = ExitRefused
		return nil
	}
	return err
}

// progressBar draws one line on a terminal, redrawn in place.
type progressBar struct {
	w    io.Writer
	last time.Time
	drew bool
}

func (b *progressBar) update(p image.Progress) {
	// At most ten redraws a second: a terminal is slow to write to.
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && p.Done < p.Total {
		return
	}
	b.last = now
	const width = 30
	n := 0
	if p.Total > 0 {
		n = int(int64(width) * min(p.Done, p.Total) / p.Total)
	}
	fmt.Fprintf(b.w, "\r\x1b[Klayer %d/%d [%s%s] %s / %s", p.Layer+1, p.Layers, strings.Repeat("=", n),
		strings.Repeat(" ", width-n), humanSize(p.Done), humanSize(p.Total))
	b.drew = true
}

// end clears the bar's line; a nil bar (not a terminal) does nothing.
func (b *progressBar) end() {
	if b != nil && b.drew {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
