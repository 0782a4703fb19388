package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/server"
)

// ParkedOut lists parked sessions.
type ParkedOut struct {
	Parked []server.ParkedInfo `json:"parked"`
	// Damaged parks cannot be resumed; `dryexec gc` removes them.
	Damaged []server.DamagedPark `json:"damaged,omitempty"`
}

func (t *tools) sessionPark(ctx context.Context, _ *mcp.CallToolRequest, in SessionIDIn) (string, server.ParkedInfo, error) {
	pi, err := t.svc.ParkSession(ctx, in.SessionID)
	if err != nil {
		return "", server.ParkedInfo{}, err
	}
	return fmt.Sprintf("parked %s (%d bytes saved, nothing running): session_resume it to go on where it was", pi.SessionID, pi.Bytes), pi, nil
}

func (t *tools) sessionParked(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (string, ParkedOut, error) {
	var out ParkedOut
	out.Parked, out.Damaged = t.svc.Parks()
	if len(out.Parked) == 0 {
		return "no parked sessions", out, nil
	}
	var ids []string
	for _, p := range out.Parked {
		ids = append(ids, p.SessionID)
	}
	return "parked: " + strings.Join(ids, ", ") + " (session_resume one to go on)", out, nil
}

func (t *tools) sessionResume(ctx context.Context, _ *mcp.CallToolRequest, in SessionIDIn) (string, SessionOut, error) {
	l, err := t.svc.ResumeSession(ctx, in.SessionID)
	if err != nil {
		return "", SessionOut{}, err
	}
	info := l.Info()
	return fmt.Sprintf("resumed %s where it was parked (files, cwd, environment, cache); next: session_shell or session_python", info.SessionID),
		SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace, Warnings: info.Warnings}, nil
}

// addParkTools registers session_park, session_parked and session_resume.
func addParkTools(s *mcp.Server, t *tools) {
	no := new(bool)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_park", Title: "Park a session",
		Description: "Save a session to disk and stop it (vm rung only): nothing runs or is held until session_resume, which brings back its files, cwd, environment and cache as they were. Other rungs refuse and the session goes on.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, IdempotentHint: false, OpenWorldHint: no}}}, t.sessionPark)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_parked", Title: "List parked sessions",
		Description: "List the sessions parked with session_park that can be resumed, oldest first.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no}}}, t.sessionParked)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_resume", Title: "Resume a parked session",
		Description: "Start a parked session again under its id, where it was parked; then use it as before.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, IdempotentHint: false, OpenWorldHint: no}}}, t.sessionResume)
}
