package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/compare"
)

// ForkIn asks for branches of a session.
type ForkIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	N         int    `json:"n,omitempty" jsonschema:"how many branches, 1 to 16 (absent: 1)"`
}

// ForkOut lists the branches.
type ForkOut struct {
	SessionID string       `json:"session_id"`
	Branches  []SessionOut `json:"branches"`
}

// KeepIn names the branch to keep.
type KeepIn struct {
	SessionID string `json:"session_id" jsonschema:"the parent session's id"`
	Branch    string `json:"branch" jsonschema:"the id of the branch (a session session_fork made) whose changes the parent takes"`
}

// KeepOut says what was kept and discarded.
type KeepOut struct {
	SessionID string   `json:"session_id"`
	Kept      string   `json:"kept"`
	Discarded []string `json:"discarded"`
}

// CompareIn lists what to compare.
type CompareIn struct {
	IDs []string `json:"ids" jsonschema:"two to sixteen ids: sessions (se_…, compared by their diff: a branch's since its fork) or stored trials (tr_…)"`
}

func (t *tools) sessionFork(ctx context.Context, _ *mcp.CallToolRequest, in ForkIn) (string, ForkOut, error) {
	ls, err := t.svc.ForkSession(ctx, in.SessionID, in.N)
	if err != nil {
		return "", ForkOut{}, err
	}
	out := ForkOut{SessionID: in.SessionID, Branches: []SessionOut{}}
	var ids []string
	for _, l := range ls {
		info := l.Info()
		out.Branches = append(out.Branches, SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace, Warnings: info.Warnings})
		ids = append(ids, info.SessionID)
	}
	return fmt.Sprintf("forked %s into %s: each starts from its files, cwd, environment and cache now; try an alternative in each, compare them with session_compare, then session_keep the one to keep", in.SessionID, strings.Join(ids, ", ")), out, nil
}

func (t *tools) sessionKeep(ctx context.Context, _ *mcp.CallToolRequest, in KeepIn) (string, KeepOut, error) {
	r, err := t.svc.KeepBranch(ctx, in.SessionID, in.Branch)
	if err != nil {
		return "", KeepOut{}, err
	}
	t.mu.Lock()
	for _, id := range append([]string{r.Kept}, r.Discarded...) {
		delete(t.seeds, id)
	}
	t.mu.Unlock()
	return fmt.Sprintf("kept %s: its changes are now %s's (session_diff shows them, session_commit applies them); discarded %d other branch(es)", r.Kept, r.SessionID, len(r.Discarded)),
		KeepOut{SessionID: r.SessionID, Kept: r.Kept, Discarded: r.Discarded}, nil
}

func (t *tools) sessionCompare(ctx context.Context, _ *mcp.CallToolRequest, in CompareIn) (string, *compare.Result, error) {
	r, err := t.svc.Compare(ctx, in.IDs)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	if err := compare.Render(&b, r); err != nil {
		return "", nil, err
	}
	return b.String(), r, nil
}
