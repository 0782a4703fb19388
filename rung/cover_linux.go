package rung

import "github.com/dryexec/dryexec/rung/linuxns"

// Covered lists what every sandbox's view covers of the host, resolved: the
// default credential masks beneath every home, and dryexec's own state (own,
// plus the default places). Whatever copies host files into a sandbox from
// outside it (a session's seed directory) must leave these out, or it
// carries in what the view hides.
func Covered(own []string) ([]string, error) {
	c, err := linuxns.ResolveCover(nil, false, own)
	if err != nil {
		return nil, err
	}
	return append(c.Masks, c.Hidden...), nil
}
