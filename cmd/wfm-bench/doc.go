package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where and on what a run took place.
type machine struct {
	Date, CPU, RAM, Kernel, Go, PostgreSQL string
	Cores                                  int
	Source                                 string // commit of the source tree
	Server                                 string // server binary and its commit
}

func describeMachine(ctx context.Context, b *bench) machine {
	m := machine{Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Cores: runtime.NumCPU(), CPU: "unknown", RAM: "unknown", Kernel: "unknown"}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			m.RAM = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(data))
	}
	m.Go = output(ctx, b.cfg.src, "go", "env", "GOVERSION")
	m.PostgreSQL = b.pgVersion
	if m.PostgreSQL == "" {
		m.PostgreSQL = output(ctx, "", b.pgTool("postgres"), "--version")
	}
	m.Source = output(ctx, b.cfg.src, "git", "rev-parse", "--short", "HEAD")
	if exec.CommandContext(ctx, "git", "-C", b.cfg.src, "diff", "--quiet", "HEAD", "--", ".", ":!docs/benchmarks.md").Run() != nil {
		m.Source += " with uncommitted changes"
	}
	m.Server = "none"
	switch {
	case b.wfm == "":
	case b.cfg.bin == "":
		m.Server = "bin/wfm, built from the source tree"
	default:
		m.Server = "`" + b.wfm + "` (the binary carries no commit stamp; the note may say which)"
		if info, err := buildinfo.ReadFile(b.wfm); err == nil {
			var rev, modified string
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if len(rev) > 7 {
				rev = rev[:7]
			}
			if rev != "" {
				m.Server = "`" + b.wfm + "` (built from commit " + rev
				if modified == "true" {
					m.Server += " with uncommitted changes"
				}
				m.Server += ", " + info.GoVersion + ")"
			}
		}
	}
	return m
}

// output is the trimmed output of a command, or "unknown".
func output(ctx context.Context, dir, name string, args ...string) string {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// The sections the harness writes are delimited by these comments, so
// that a run replaces its own section and keeps the others.
const (
	sectionBegin = "<!-- wfm-bench section: %s -->"
	sectionEnd   = "<!-- wfm-bench end -->"
)

// renderSection is the Markdown section of one run.
func renderSection(title string, m machine, args []string, note string, took time.Duration, figs []Figure) string {
	var s strings.Builder
	fmt.Fprintf(&s, sectionBegin+"\n## %s\n\n", title, title)
	fmt.Fprintf(&s, "Taken %s by `wfm-bench %s` (%s).\n\n", m.Date, commandLine(args), took)
	fmt.Fprintf(&s, "- server: %s\n", m.Server)
	fmt.Fprintf(&s, "- source tree (Go benchmarks, tools): commit %s\n", m.Source)
	fmt.Fprintf(&s, "- machine: %s, %d cores, %s RAM, %s, %s, %s\n", m.CPU, m.Cores, m.RAM, m.Kernel, m.Go, m.PostgreSQL)
	if note != "" {
		fmt.Fprintf(&s, "\n%s\n", note)
	}
	s.WriteString("\n```text\n")
	for _, f := range figs {
		s.WriteString(f.Line() + "\n")
	}
	s.WriteString("```\n" + sectionEnd + "\n")
	return s.String()
}

// writeSection puts section into the Markdown file at path: in place of the
// section with the same title, or at the end. A missing file is created.
func writeSection(path, title, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(doc) == 0 {
		doc = []byte("# Benchmarks\n")
	}
	out := replaceSection(string(doc), title, section)
	return os.WriteFile(path, []byte(out), 0o644)
}

func replaceSection(doc, title, section string) string {
	begin := fmt.Sprintf(sectionBegin, title)
	if i := strings.Index(doc, begin); i >= 0 {
		if j := strings.Index(doc[i:], sectionEnd); j >= 0 {
			end := i + j + len(sectionEnd)
			if end < len(doc) && doc[end] == '\n' {
				end++
			}
			return doc[:i] + section + doc[end:]
		}
	}
	if !strings.HasSuffix(doc, "\n") {
		doc += "\n"
	}
	return doc + "\n" + section
}

// commandLine is args as a shell would take them, without -note (the
// section prints the note itself).
func commandLine(args []string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-note" || a == "--note":
			i++
			continue
		case strings.HasPrefix(a, "-note=") || strings.HasPrefix(a, "--note="):
			continue
		}
		if a == "" || strings.ContainsAny(a, " '\"`$\\()*?;&|<>") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}
