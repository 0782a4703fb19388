// Package conformance is the session conformance corpus: one Go test suite,
// written against package session's public API only, run once per rung that
// holds sessions ("host", "ns", "gvisor" and "vm"; `make test` runs every one
// this machine has, as root, and the ns rung again as an unprivileged user,
// but vm: a VM boot per session, which `make test-vm` runs with
// DRYEXEC_TEST_VM=1). A rung that fails any case is not a rung.
//
// Every case is a subtest of TestConformance named group/case/rung, so
//
//	go test ./conformance -run 'TestConformance/diff/.*/ns'
//
// runs one group on one rung, and DRYEXEC_CONFORMANCE_RUNG=ns restricts the
// whole suite to one rung (TestRootless uses it to re-run the suite as uid
// 65534 through setpriv).
//
// Decisions the corpus pins down (both rungs must agree):
//
//   - A diff is file-based: directories are reported only through the files
//     they hold. A new empty directory, or a chmod of a directory, is not a
//     change; a deleted directory is one delete per file beneath it.
//   - Modes are permission bits with the exec bits kept and setuid, setgid and
//     sticky stripped (chmod 4755 reports 0755). Every written file also has
//     its mode in Diff.Modes; symlinks are reported with mode 0777.
//   - Symlinks are reported as links (their target), never followed: neither
//     by the diff nor when its contents are read.
//   - A tree that push_tree refuses (an entry naming "..", an absolute path, a
//     path through a symlink, a hard link or device) leaves the workspace
//     cleanly empty: no files, an empty baseline (Diff is empty), and the
//     session still works. Nothing is written outside the workspace.
//   - A timed-out exec reports exit 124 and TimedOut, kills its whole process
//     group, and does not update the session's cwd or environment.
//
// Groups: ping, shell, diff, push_tree, isolation, lifecycle, concurrency,
// python (exec_python), cache (the session cache and emit), host_objects.
// Only white-box tests of the host side (forged guest frames) and the ns
// rung's own attack test stay in package session.
package conformance
