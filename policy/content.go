package policy

import "github.com/dryexec/dryexec"

// checkContent fails closed on a delta that does not hold everything: an
// incomplete one (the guest died, the trial ran out of time to collect what
// it wrote) is blocked, and a file whose content was not kept (a cap, the
// store's quota, the deadline) needs a person, since commit cannot apply it.
func (e *Engine) checkContent(d *dryexec.StateDelta, fs *facts) {
	if d.Incomplete {
		reason := d.IncompleteReason
		if reason == "" {
			reason = "no reason given"
		}
		fs.add(EffectBlock, "the delta is incomplete: %s", reason)
	}
	var notKept examples
	why := ""
	_ = d.EachFile(func(f *dryexec.FileChange) error { // a read error: checkFiles blocks
		if !f.Kept() {
			notKept.add(dryexec.QuotePath(f.Path))
			if why == "" {
				why = f.ContentReason
			}
		}
		return nil
	})
	if notKept.n > 0 {
		fs.add(EffectReview, "the content of %d file(s) was not kept, so commit cannot apply them: %s (%s)", notKept.n, notKept.String(), why)
	}
}
