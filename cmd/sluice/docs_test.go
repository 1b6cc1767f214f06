package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The docs check (`make verify`): every `sluice …` command line and every
// `make TARGET` the README and docs/ show, in shell code blocks and inline
// code, names a command, flag and target that exist.

// docCommand is one command line found in a doc.
type docCommand struct {
	where string // file:line
	words []string
}

// commandStarts are the words after which a word is in command position.
var commandStarts = []string{"", "$", "&&", "||", ";", "|", "(", "time", "exec", "sudo", "kubectl", "watch", "then", "do"}

// envAssign is VAR=value before a command.
var envAssign = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// commandsIn finds the sluice and make command lines of a Markdown text.
func commandsIn(name, text string) (sluice, makes []docCommand) {
	inBlock, shell := false, false
	inlineCode := regexp.MustCompile("`([^`]+)`")
	for i, line := range strings.Split(text, "\n") {
		where := fmt.Sprintf("%s:%d", name, i+1)
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if !inBlock {
				lang := strings.TrimPrefix(trimmed, "```")
				shell = lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console"
			}
			inBlock = !inBlock
			continue
		}
		var spans []string
		switch {
		case inBlock && shell:
			spans = []string{line}
		case !inBlock:
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				spans = append(spans, m[1])
			}
		}
		for _, span := range spans {
			if c, _, ok := strings.Cut(span, " #"); ok {
				span = c // a comment
			}
			words := strings.Fields(span)
			for j, w := range words {
				prev := ""
				if j > 0 {
					prev = words[j-1]
				}
				atStart := slices.Contains(commandStarts, prev) || envAssign.MatchString(prev)
				switch {
				case (w == "bin/sluice" || w == "./bin/sluice" || w == "sluice") && atStart:
					sluice = append(sluice, docCommand{where, argsOf(words[j+1:])})
				case w == "make" && atStart:
					makes = append(makes, docCommand{where, argsOf(words[j+1:])})
				}
			}
		}
	}
	return sluice, makes
}

// argsOf are a command's words up to the end of the command.
func argsOf(words []string) []string {
	var out []string
	quoted := false
	for _, w := range words {
		// A quoted value of several words is one argument: left out.
		if strings.Count(w, `"`)%2 == 1 {
			quoted = !quoted
			continue
		}
		if quoted || w == "…" || w == "..." {
			continue
		}
		if w == "|" || w == "&&" || w == "||" || w == ";" || w == "&" || w == ")" || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") {
			break
		}
		out = append(out, strings.TrimRight(w, ";),`"))
	}
	return out
}

// checkSluice says what of a sluice command line does not exist.
func checkSluice(root *cobra.Command, words []string) error {
	var positional []string
	for _, w := range words {
		if strings.HasPrefix(w, "-") {
			break
		}
		positional = append(positional, w)
	}
	cmd, rest, err := root.Find(positional)
	if err != nil {
		return err
	}
	if cmd.HasSubCommands() && len(rest) > 0 && !cmd.Runnable() {
		return fmt.Errorf("%q has no subcommand %q", cmd.CommandPath(), rest[0])
	}
	for _, w := range words[len(positional):] {
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" || strings.ContainsAny(w, `"'$`) {
			continue
		}
		var f any
		if name, ok := strings.CutPrefix(w, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if fl := cmd.Flags().Lookup(name); fl != nil {
				f = fl
			} else if fl := cmd.InheritedFlags().Lookup(name); fl != nil {
				f = fl
			} else if name == "help" {
				f = name
			}
		} else if sh := strings.TrimPrefix(w, "-"); len(sh) == 1 {
			if fl := cmd.Flags().ShorthandLookup(sh); fl != nil {
				f = fl
			} else if sh == "h" {
				f = sh
			}
		} else {
			continue // a value such as -1, or a word of prose
		}
		if f == nil {
			return fmt.Errorf("%q has no flag %s", cmd.CommandPath(), w)
		}
	}
	return nil
}

// makeTargets are the targets the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

func checkMake(targets map[string]bool, words []string) error {
	for _, w := range words {
		if strings.Contains(w, "=") || strings.HasPrefix(w, "-") {
			continue
		}
		if !targets[w] {
			return fmt.Errorf("make has no target %q", w)
		}
	}
	return nil
}

// docFiles are the docs a newcomer reads.
func docFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join("..", "..", "README.md")}, files...)
}

func checkDoc(root *cobra.Command, targets map[string]bool, name, text string) []string {
	var problems []string
	sl, mk := commandsIn(name, text)
	for _, c := range sl {
		if err := checkSluice(root, c.words); err != nil {
			problems = append(problems, fmt.Sprintf("%s: sluice %s: %v", c.where, strings.Join(c.words, " "), err))
		}
	}
	for _, c := range mk {
		if err := checkMake(targets, c.words); err != nil {
			problems = append(problems, fmt.Sprintf("%s: make %s: %v", c.where, strings.Join(c.words, " "), err))
		}
	}
	return problems
}

func docsRoot() *cobra.Command {
	root := newRootCmd(context.Background())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return root
}

// TestDocsNameRealCommands is the docs check.
func TestDocsNameRealCommands(t *testing.T) {
	root, targets := docsRoot(), makeTargets(t)
	checked := 0
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Join("..", ".."), f)
		sl, mk := commandsIn(rel, string(b))
		checked += len(sl) + len(mk)
		for _, p := range checkDoc(root, targets, rel, string(b)) {
			t.Error(p)
		}
	}
	if checked < 50 {
		t.Errorf("only %d command lines found in the docs: the check reads them wrong", checked)
	}
}

// TestDocsCheckFindsMistakes: a wrong flag, subcommand or target in a doc
// is reported with where it is.
func TestDocsCheckFindsMistakes(t *testing.T) {
	root, targets := docsRoot(), makeTargets(t)
	doc := "Run `sluice pending --cluster-queue team-a` and `bin/sluice get workloads -A`.\n" +
		"```sh\n" +
		"bin/sluice pending --clusterqueue team-a   # a wrong flag\n" +
		"KUBECONFIG=x sluice events tial --all\n" +
		"make tests\n" +
		"helm install sluice charts/sluice -n sluice-system\n" +
		"bin/sluice get workloads -Z\n" +
		"```\n"
	got := checkDoc(root, targets, "doc.md", doc)
	want := []string{
		`doc.md:3: sluice pending --clusterqueue team-a: "sluice pending" has no flag --clusterqueue`,
		`doc.md:4: sluice events tial --all: "sluice events" has no subcommand "tial"`,
		`doc.md:7: sluice get workloads -Z: "sluice get" has no flag -Z`,
		`doc.md:5: make tests: make has no target "tests"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
