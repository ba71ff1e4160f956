package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/wfm-dev/wfm/internal/buildinfo"
)

// command is one of wfm's subcommands: `wfm <name> [flags]`.
type command struct {
	name string
	// flags are other spellings run accepts in the command's place
	// ("-version").
	flags []string
	// summary is its line in `wfm -help`.
	summary string
	run     func(args []string, getenv func(string) string, stdout, stderr io.Writer) error
}

// commands are wfm's subcommands: run dispatches to them, and `wfm -help`
// lists them, so a command cannot exist without its line. A function rather
// than a variable: the usage printer that reads it is reached from the
// commands' own code.
func commands() []command {
	return []command{
		{name: "issue-client-cert", summary: "issue a development client certificate (a device agent's SPIFFE ID) from the development CA in <data-dir>/pki",
			run: issueClientCert},
		{name: "print-admin-token", summary: "print the bootstrap admin token the server uses (where there is no shell: docker compose exec wfm wfm print-admin-token)",
			run: printAdminToken},
		{name: "remove-data", summary: "delete a stopped server's data folder (-data-dir) and the private PostgreSQL cluster it holds or links to",
			run: removeData},
		{name: "version", flags: []string{"-version", "--version"}, summary: "print the version, the source revision and the Go release of this build (also: wfm -version)",
			run: printVersion},
	}
}

// usage is `wfm -help`: the commands, then the server's flags.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprint(w, "Usage:\n  wfm [flags]              run the server\n  wfm <command> [flags]    run a command (wfm <command> -help lists its flags)\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nFlags of the server (each also read from the environment variable its line names; a flag wins):\n")
	fs.PrintDefaults()
}

// printVersion is `wfm version`: one line, for people and scripts alike.
func printVersion(args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wfm version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("version: unexpected arguments: %v", fs.Args())
	}
	b := buildinfo.Read()
	fmt.Fprintf(stdout, "wfm %s (revision %s, %s)\n", b.Version, b.Revision, b.GoVersion)
	return nil
}
