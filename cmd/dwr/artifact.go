package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

func artifactCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "artifact", Short: "store, fetch and list artifacts: files kept by the SHA-256 of their bytes"}
	cmd.AddCommand(artifactPutCmd(g), artifactGetCmd(g), artifactLsCmd(g))
	return cmd
}

func artifactPutCmd(g *globals) *cobra.Command {
	var meta client.ArtifactMeta
	put := &cobra.Command{
		Use:   "put FILE|- [--name NAME] [--type MEDIA-TYPE] [--task ID]",
		Short: "store a file (or stdin) as an artifact of the workspace and print its digest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fail(exitInvalid, "cannot read %s: %v", args[0], errors.Unwrap(err))
				}
				defer func() { _ = f.Close() }()
				in = f
				if meta.Name == "" {
					meta.Name = filepath.Base(args[0])
				}
				if meta.Type == "" {
					meta.Type = executors.MediaType(args[0])
				}
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				info, err := cl.PutArtifact(ctx, in, meta)
				if err != nil {
					return err
				}
				return show(g, info, func(w io.Writer, i *schemas.ArtifactInfo) error {
					line := fmt.Sprintf("artifact %s stored: %s, %s", i.SHA256, dash(i.Name), size(i.Size))
					if i.Duplicate {
						line = fmt.Sprintf("artifact %s already stored (%s, %s): nothing stored again", i.SHA256, dash(i.Name), size(i.Size))
					}
					_, err := fmt.Fprintln(w, line)
					return err
				})
			})
		},
	}
	put.Flags().StringVar(&meta.Name, "name", "", "the name it is shown by (default: the file's)")
	put.Flags().StringVar(&meta.Type, "type", "", "its media type (default: from the file's extension)")
	put.Flags().StringVar(&meta.TaskID, "task", "", "the task it belongs to")
	return put
}

func artifactGetCmd(g *globals) *cobra.Command {
	var out string
	get := &cobra.Command{
		Use:   "get SHA256 [-o FILE]",
		Short: "fetch an artifact, checking its bytes against the digest: to FILE (written only once checked) or stdout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				if out != "" && out != "-" {
					err := cl.SaveArtifact(ctx, args[0], out)
					var pe *os.PathError
					if errors.As(err, &pe) && !errors.Is(err, client.ErrArtifactCorrupt) {
						return fail(exitInvalid, "cannot write %s: %v", out, pe.Err)
					}
					return artifactError(args[0], err)
				}
				r, err := cl.GetArtifact(ctx, args[0])
				if err != nil {
					return err
				}
				defer func() { _ = r.Close() }()
				_, err = io.Copy(cmd.OutOrStdout(), r)
				return artifactError(args[0], err)
			})
		},
	}
	get.Flags().StringVarP(&out, "output", "o", "", "the file to write (default: stdout, where bytes that fail the check are already written when it says so)")
	return get
}

// artifactError says what a failed read of an artifact means.
func artifactError(sha string, err error) error {
	if errors.Is(err, client.ErrArtifactCorrupt) {
		return fail(exitDamaged, "artifact %s: the stored bytes do not have its digest: the store is damaged; put the artifact again from its source (%v)", sha, err)
	}
	return err
}

func artifactLsCmd(g *globals) *cobra.Command {
	var taskID string
	ls := &cobra.Command{
		Use:   "ls --task ID",
		Short: "list the artifacts a task names: its attempts' outputs, model steps and verification evidence",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if taskID == "" {
				return fail(exitInvalid, "--task is required")
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				t, err := cl.Task(ctx, taskID)
				if err != nil {
					return err
				}
				rows := t.NamedArtifacts()
				if g.json {
					return printJSON(g.out, rows)
				}
				return columns([]string{"SHA256", "NAME", "SIZE", "TYPE", "FROM"}, func(r schemas.NamedArtifact) []string {
					return []string{r.SHA256[:16], r.Name, size(r.Size), dash(r.Type), r.From}
				})(g.out, rows)
			})
		},
	}
	ls.Flags().StringVar(&taskID, "task", "", "the task (required)")
	return ls
}

// size says n bytes for people.
func size(n int64) string {
	switch {
	case n == 0:
		return "-"
	case n < 10<<10:
		return strconv.FormatInt(n, 10) + " B"
	case n < 10<<20:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}
