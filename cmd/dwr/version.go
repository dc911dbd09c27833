package main

import (
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo is what dwr version prints.
type buildInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// versionOf returns the build's version: the module's, and the VCS
// revision it was built from when the build recorded one.
func versionOf() buildInfo {
	b := buildInfo{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "print the version of this dwr binary", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return show(g, versionOf(), func(w io.Writer, b buildInfo) error {
				line := "dwr " + b.Version
				if b.Revision != "" {
					line += " (" + b.Revision
					if b.Modified {
						line += ", modified"
					}
					line += ")"
				}
				_, err := io.WriteString(w, line+", "+b.Go+", "+b.Platform+"\n")
				return err
			})
		},
	}
}
