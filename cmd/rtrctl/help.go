package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag, last on a command line, makes rtrctl print the
// completions of the words before it instead of running them (complete);
// the bash and zsh scripts call rtrctl with it. The name is urfave/cli's.
const completionFlag = "--generate-bash-completion"

// complete prints, one per line, the completions of the last of words:
// when it starts with "-", the flags of the command the words name that
// begin with it; else that command's subcommands.
func complete(app *cli.App, words []string, w io.Writer) {
	cmds, flags := app.Commands, app.Flags
	for _, word := range words[:max(len(words)-1, 0)] {
		if cmd := findCommand(cmds, word); cmd != nil {
			cmds, flags = cmd.Subcommands, cmd.Flags
		}
	}
	if len(words) > 0 && strings.HasPrefix(words[len(words)-1], "-") {
		prefix := words[len(words)-1]
		for _, f := range append(flags, cli.HelpFlag) {
			for _, name := range f.Names() {
				dashed := "--" + name
				if len(name) == 1 {
					dashed = "-" + name
				}
				if strings.HasPrefix(dashed, prefix) {
					fmt.Fprintln(w, dashed)
				}
			}
		}
		return
	}
	if len(words) > 0 {
		if cmd := findCommand(cmds, words[len(words)-1]); cmd != nil {
			cmds = cmd.Subcommands
		}
	}
	for _, cmd := range cmds {
		if !cmd.Hidden {
			fmt.Fprintln(w, cmd.Name)
		}
	}
}

func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show the help of rtrctl or of a command",
		ArgsUsage: "[COMMAND [SUBCOMMAND]]",
		Description: `The same as 'rtrctl COMMAND --help'.

Examples:
  rtrctl help
  rtrctl help read
  rtrctl help store inspect`,
		Action: func(c *cli.Context) error {
			path := c.Args().Slice()
			if len(path) == 0 {
				return cli.ShowAppHelp(c)
			}
			cmds := c.App.Commands
			for i, name := range path {
				cmd := findCommand(cmds, name)
				if cmd == nil || cmd.Hidden {
					where := "rtrctl"
					if i > 0 {
						where = "rtrctl " + strings.Join(path[:i], " ")
					}
					return usagef(fmt.Sprintf("run '%s --help' for the list of commands", where), "unknown command %q", strings.Join(path[:i+1], " "))
				}
				cmds = cmd.Subcommands
			}
			args := append(append([]string{c.App.Name}, path...), "--help")
			return newApp(c.App.Reader, c.App.Writer, c.App.ErrWriter).RunContext(c.Context, args)
		},
	}
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints a script that completes rtrctl's commands and flags in the shell.

Examples:
  source <(rtrctl completion bash)                 # in ~/.bashrc
  rtrctl completion zsh > "${fpath[1]}/_rtrctl"     # then restart zsh
  rtrctl completion fish > ~/.config/fish/completions/rtrctl.fish`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("run 'rtrctl completion bash', 'zsh' or 'fish'", "want one shell, got %d arguments", c.NArg())
			}
			var script string
			switch c.Args().First() {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("completion fish: %w", err)
				}
				script = s
			default:
				return usagef("use bash, zsh or fish", "no completion for shell %q", c.Args().First())
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}

// The scripts ask rtrctl itself: the words typed so far, then
// completionFlag (after the current word when it starts with "-", to
// complete flags).
const bashCompletion = `# bash completion for rtrctl: source <(rtrctl completion bash)
_rtrctl_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == -* ]]; then
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" ` + completionFlag + ` 2>/dev/null)
  else
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" ` + completionFlag + ` 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _rtrctl_complete rtrctl
`

const zshCompletion = `#compdef rtrctl
# zsh completion for rtrctl: rtrctl completion zsh > "${fpath[1]}/_rtrctl"
_rtrctl() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} "$cur" ` + completionFlag + ` 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ` + completionFlag + ` 2>/dev/null)}")
  fi
  if [[ -n "${opts[1]}" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _rtrctl rtrctl
`
