package guest

import (
	"fmt"
	"os"
	"strconv"

	"github.com/dryexec/dryexec/wire"
)

// HostWalkScratchFD is the descriptor a host-walk helper gets the scratch
// tmpfs on (its wire stream is wire.CtrlFD).
const HostWalkScratchFD = wire.CtrlFD + 1

// runHostWalk is the helper the host starts when a trial's guest died or
// broke the protocol after the command was sent: it walks the upper dirs of
// the scratch tmpfs the host kept a handle on (HostWalkScratchFD) exactly as
// the guest would have, and streams fs.entry/fs.data frames, then
// trial.done. Every sandbox process is dead by then, so nothing changes under
// it. The content is the command's: the host's Differ checks each entry as it
// checks a guest's. args: the number of upper dirs, and "user" or "trusted"
// for the overlays' xattr namespace.
func runHostWalk(args []string) int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	if len(args) != 2 || (args[1] != "user" && args[1] != "trusted") {
		return sendFailure(conn, "protocol", fmt.Errorf("host-walk: want N user|trusted, got %q", args))
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 0 {
		return sendFailure(conn, "protocol", fmt.Errorf("host-walk: bad count %q", args[0]))
	}
	if err := walkUppers(conn, HostWalkScratchFD, n, args[1] == "user"); err != nil {
		return sendFailure(conn, "walk", err)
	}
	if err := conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{}); err != nil {
		return 1
	}
	return 0
}
