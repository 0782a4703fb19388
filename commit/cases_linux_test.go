package commit

import "github.com/dryexec/dryexec"

type changeList = []dryexec.FileChange

// applyCase is a host tree, a delta made against it, and the tree the delta
// must produce.
type applyCase struct {
	name    string
	before  tree
	changes func(f *fx) changeList
	after   tree
	force   bool // commit with Options.Force
}

// common is a host tree every case starts from, so each one also proves that
// what it does not name stays as it was.
var common = tree{
	"keep.txt":     reg("keep\n", 0o644),
	"keepdir":      dir(0o755),
	"keepdir/k1":   reg("k1\n", 0o600).own(42, 43),
	"keepdir/link": sym("k1"),
}

func applyCases() []applyCase {
	return []applyCase{
		{
			name:    "create file",
			before:  common,
			changes: func(f *fx) changeList { return changeList{f.create("new.txt", "new\n", 0o640)} },
			after:   common.with("new.txt", reg("new\n", 0o640)),
		},
		{
			name:    "create empty file in existing dir",
			before:  common,
			changes: func(f *fx) changeList { return changeList{f.create("keepdir/empty", "", 0o600)} },
			after:   common.with("keepdir/empty", reg("", 0o600)),
		},
		{
			name: "modify keeps other files",
			before: common.with("a", reg("a\n", 0o644), "b", reg("b\n", 0o644), "c", reg("c\n", 0o644),
				"keepdir/b", reg("inner b\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{f.modify("b", "b\n", 0o644, "b changed\n", 0o644)}
			},
			after: common.with("a", reg("a\n", 0o644), "b", reg("b changed\n", 0o644), "c", reg("c\n", 0o644),
				"keepdir/b", reg("inner b\n", 0o644)),
		},
		{
			name:   "modify content and mode",
			before: common.with("m", reg("old\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{f.modify("m", "old\n", 0o644, "new and longer\n", 0o600)}
			},
			after: common.with("m", reg("new and longer\n", 0o600)),
		},
		{
			// Owner changes (as root): alone, with the mode (a setuid file
			// keeps its bit though chown clears it), of a dir, of a symlink
			// (lchown: its target keeps its owner), and with new content.
			name: "chown",
			before: common.with("f", reg("f\n", 0o644), "s", reg("s\n", 0o4755), "d", dir(0o755),
				"m", reg("m\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{
					chowned(f.chmodFile("f", "f\n", 0o644, 0o644), 0, 0, 65534, 0),
					chowned(f.chmodFile("s", "s\n", 0o4755, 0o4750), 0, 0, 1234, 5678),
					chowned(f.chmodDir("d", 0o755, 0o755), 0, 0, 65534, 65534),
					f.chownLink("keepdir/link", "k1", 0, 0, 7, 8),
					chowned(f.modify("m", "m\n", 0o644, "m2\n", 0o644), 0, 0, 9, 10),
				}
			},
			after: common.with("f", reg("f\n", 0o644).own(65534, 0), "s", reg("s\n", 0o4750).own(1234, 5678),
				"d", dir(0o755).own(65534, 65534), "keepdir/link", sym("k1").own(7, 8), "m", reg("m2\n", 0o644).own(9, 10)),
		},
		{
			name:    "delete file",
			before:  common.with("gone", reg("bye\n", 0o644)),
			changes: func(f *fx) changeList { return changeList{f.del("gone", "bye\n", 0o644)} },
			after:   common,
		},
		{
			name:    "chmod file",
			before:  common.with("run.sh", reg("#!/bin/sh\n", 0o644)),
			changes: func(f *fx) changeList { return changeList{f.chmodFile("run.sh", "#!/bin/sh\n", 0o644, 0o755)} },
			after:   common.with("run.sh", reg("#!/bin/sh\n", 0o755)),
		},
		{
			name:    "chmod dir",
			before:  common.with("d", dir(0o755), "d/f", reg("f\n", 0o644)),
			changes: func(f *fx) changeList { return changeList{f.chmodDir("d", 0o755, 0o700)} },
			after:   common.with("d", dir(0o700), "d/f", reg("f\n", 0o644)),
		},
		{
			name:   "setuid 4755 survives create, modify and chmod",
			before: common.with("bin", dir(0o755), "bin/old", reg("old\n", 0o4755), "bin/plain", reg("p\n", 0o755)),
			changes: func(f *fx) changeList {
				return changeList{
					f.create("bin/suid", "elf\n", 0o4755),
					f.create("bin/sgid", "elf2\n", 0o2755),
					f.modify("bin/old", "old\n", 0o4755, "newer\n", 0o4755),
					f.chmodFile("bin/plain", "p\n", 0o755, 0o4755),
				}
			},
			after: common.with("bin", dir(0o755), "bin/old", reg("newer\n", 0o4755), "bin/plain", reg("p\n", 0o4755),
				"bin/suid", reg("elf\n", 0o4755), "bin/sgid", reg("elf2\n", 0o2755)),
		},
		{
			name:   "ownership applied",
			before: common.with("theirs", reg("t\n", 0o644).own(1000, 1000)),
			changes: func(f *fx) changeList {
				return changeList{
					owned(f.modify("theirs", "t\n", 0o644, "t2\n", 0o644), 1000, 1000),
					owned(f.mkdir("od", 0o2775), 1234, 5678),
					owned(f.create("od/suid", "x\n", 0o4755), 1234, 5678),
					owned(f.create("owned.txt", "o\n", 0o640), 1234, 5678),
					owned(f.symlink("od/ln", "suid"), 1234, 5678),
				}
			},
			after: common.with("theirs", reg("t2\n", 0o644).own(1000, 1000), "od", dir(0o2775).own(1234, 5678),
				"od/suid", reg("x\n", 0o4755).own(1234, 5678), "owned.txt", reg("o\n", 0o640).own(1234, 5678),
				"od/ln", sym("suid").own(1234, 5678)),
		},
		{
			name:   "nested new dirs with files",
			before: common,
			changes: func(f *fx) changeList {
				return changeList{
					f.mkdir("n", 0o755), f.create("n/f", "nf\n", 0o644),
					f.mkdir("n/m", 0o750), f.create("n/m/g", "g\n", 0o600),
					f.mkdir("n/m/k", 0o555), f.create("n/m/k/h", "h\n", 0o444),
					f.mkdir("n/empty", 0o700),
					f.symlink("n/m/k/up", "../../f"),
				}
			},
			after: common.with("n", dir(0o755), "n/f", reg("nf\n", 0o644), "n/m", dir(0o750), "n/m/g", reg("g\n", 0o600),
				"n/m/k", dir(0o555), "n/m/k/h", reg("h\n", 0o444), "n/empty", dir(0o700), "n/m/k/up", sym("../../f")),
		},
		{
			name:    "rmdir empty dir",
			before:  common.with("e", dir(0o755)),
			changes: func(f *fx) changeList { return changeList{f.rmdir("e", 0o755)} },
			after:   common,
		},
		{
			name: "delete whole tree",
			before: common.with("t", dir(0o755), "t/a", reg("a\n", 0o644), "t/s", dir(0o700), "t/s/b", reg("b\n", 0o600),
				"t/s/l", sym("b"), "t/s/e", dir(0o755)),
			changes: func(f *fx) changeList {
				return changeList{
					f.del("t/a", "a\n", 0o644),
					f.rmdir("t/s/e", 0o755), f.del("t/s/b", "b\n", 0o600), f.delLink("t/s/l", "b"),
					f.rmdir("t/s", 0o700),
					f.rmdir("t", 0o755),
				}
			},
			after: common,
		},
		{
			name:    "create symlink",
			before:  common,
			changes: func(f *fx) changeList { return changeList{f.symlink("keepdir/ln2", "../keep.txt")} },
			after:   common.with("keepdir/ln2", sym("../keep.txt")),
		},
		{
			name:    "delete symlink",
			before:  common.with("l", sym("/nonexistent")),
			changes: func(f *fx) changeList { return changeList{f.delLink("l", "/nonexistent")} },
			after:   common,
		},
		{
			name:    "retarget symlink",
			before:  common.with("l", sym("a")),
			changes: func(f *fx) changeList { return changeList{f.delLink("l", "a"), f.symlink("l", "b")} },
			after:   common.with("l", sym("b")),
		},
		{
			name:   "file to dir with children",
			before: common.with("x", reg("was a file\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{
					f.del("x", "was a file\n", 0o644), f.mkdir("x", 0o755),
					f.create("x/c", "child\n", 0o644), f.mkdir("x/sub", 0o700), f.create("x/sub/d", "deeper\n", 0o600),
				}
			},
			after: common.with("x", dir(0o755), "x/c", reg("child\n", 0o644), "x/sub", dir(0o700),
				"x/sub/d", reg("deeper\n", 0o600)),
		},
		{
			name: "dir tree to file",
			before: common.with("d", dir(0o755), "d/x", reg("x\n", 0o644), "d/e", dir(0o755),
				"d/e/y", reg("y\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{
					f.del("d/e/y", "y\n", 0o644), f.rmdir("d/e", 0o755), f.del("d/x", "x\n", 0o644), f.rmdir("d", 0o755),
					f.create("d", "now a file\n", 0o600),
				}
			},
			after: common.with("d", reg("now a file\n", 0o600)),
		},
		{
			name:    "file to symlink",
			before:  common.with("fl", reg("file\n", 0o644)),
			changes: func(f *fx) changeList { return changeList{f.del("fl", "file\n", 0o644), f.symlink("fl", "keep.txt")} },
			after:   common.with("fl", sym("keep.txt")),
		},
		{
			name:   "symlink to file",
			before: common.with("lf", sym("keep.txt")),
			changes: func(f *fx) changeList {
				return changeList{f.delLink("lf", "keep.txt"), f.create("lf", "real\n", 0o644)}
			},
			after: common.with("lf", reg("real\n", 0o644)),
		},
		{
			name:   "symlink to dir with children",
			before: common.with("ld", sym("keepdir")),
			changes: func(f *fx) changeList {
				return changeList{f.delLink("ld", "keepdir"), f.mkdir("ld", 0o755), f.create("ld/f", "in\n", 0o644)}
			},
			after: common.with("ld", dir(0o755), "ld/f", reg("in\n", 0o644)),
		},
		{
			name: "dir to symlink",
			before: common.with("dl", dir(0o755), "dl/a", reg("a\n", 0o644), "dl/s", dir(0o755),
				"dl/s/b", reg("b\n", 0o644)),
			changes: func(f *fx) changeList {
				// The new symlink points at a dir that holds names like the
				// backups this commit makes: finishing must not follow it.
				return changeList{
					f.del("dl/s/b", "b\n", 0o644), f.rmdir("dl/s", 0o755), f.del("dl/a", "a\n", 0o644), f.rmdir("dl", 0o755),
					f.symlink("dl", "../outside"),
				}
			},
			after: common.with("dl", sym("../outside")),
		},
		{
			name:   "dir removed and made again",
			before: common.with("rd", dir(0o755), "rd/x", reg("x\n", 0o644)),
			changes: func(f *fx) changeList {
				// fsdelta reports this as a chmod, but a delta may say it this way.
				return changeList{
					f.del("rd/x", "x\n", 0o644), f.rmdir("rd", 0o755), f.mkdir("rd", 0o700),
					f.create("rd/y", "y\n", 0o644),
				}
			},
			after: common.with("rd", dir(0o700), "rd/y", reg("y\n", 0o644)),
		},
		{
			name: "forced over every kind of conflict",
			// The host moved on from what the delta says it started from.
			before: common.with("occ", reg("host made this\n", 0o644), "a", reg("host edit\n", 0o644),
				"chm", reg("chm\n", 0o640), "nd", dir(0o700), "nd/theirs", reg("t\n", 0o644),
				"ext", dir(0o755), "ext/x", reg("x\n", 0o644), "ext/extra", reg("e\n", 0o644)),
			changes: func(f *fx) changeList {
				return changeList{
					f.create("occ", "trial made this\n", 0o600),          // created on the host too
					f.symlink("keepdir/k1", "elsewhere"),                 // over a host file
					f.modify("a", "a\n", 0o644, "trial edit\n", 0o644),   // edited on the host
					f.modify("gone1", "g\n", 0o644, "trial\n", 0o644),    // deleted on the host
					f.del("gone2", "g\n", 0o644),                         // deleted on the host
					f.chmodFile("chm", "chm\n", 0o644, 0o600),            // mode changed on the host
					f.mkdir("nd", 0o755), f.create("nd/f", "f\n", 0o644), // made on the host
					f.del("ext/x", "x\n", 0o644), f.rmdir("ext", 0o755), // an entry added on the host
					f.del("nodir/x", "x\n", 0o644), f.rmdir("nodir", 0o755), // deleted on the host
				}
			},
			after: common.with("occ", reg("trial made this\n", 0o600), "keepdir/k1", sym("elsewhere"),
				"a", reg("trial edit\n", 0o644), "gone1", reg("trial\n", 0o644), "chm", reg("chm\n", 0o600),
				"nd", dir(0o755), "nd/theirs", reg("t\n", 0o644), "nd/f", reg("f\n", 0o644)),
			force: true,
		},
		every,
	}
}

// every is a case with every op kind and every type replacement, for the crash
// tests.
var every = applyCase{
	name: "every op",
	before: common.with(
		"mod.txt", reg("mod\n", 0o644),
		"del.txt", reg("del\n", 0o644),
		"chm.txt", reg("chm\n", 0o644),
		"cdir", dir(0o755), "cdir/k", reg("k\n", 0o644),
		"rmd", dir(0o755), "rmd/a", reg("a\n", 0o644), "rmd/sub", dir(0o700), "rmd/sub/b", reg("b\n", 0o600),
		"oldlink", sym("keep.txt"),
		"f2d", reg("f2d\n", 0o644),
		"d2f", dir(0o755), "d2f/x", reg("x\n", 0o644),
		"f2l", reg("f2l\n", 0o644),
		"l2f", sym("nowhere"),
		"l2d", sym("keepdir"),
		"oldpipe", fifo(0o644),
		"v\xff", reg("invalid\n", 0o644), "v\ufffd", reg("replacement\n", 0o644),
		"m\xfe", reg("m\n", 0o644),
	),
	changes: func(f *fx) changeList {
		return changeList{
			owned(f.modify("mod.txt", "mod\n", 0o644, "modified\n", 0o600), 1234, 5678),
			owned(f.create("new.txt", "new\n", 0o4755), 1234, 5678),
			f.del("del.txt", "del\n", 0o644),
			f.chmodFile("chm.txt", "chm\n", 0o644, 0o600),
			f.chmodDir("cdir", 0o755, 0o750),
			owned(f.mkdir("nd", 0o2775), 1234, 5678),
			f.mkdir("nd/sub", 0o755), f.create("nd/sub/f", "f\n", 0o644),
			f.create("nd/g", "g\n", 0o644), f.symlink("nd/ln", "g"),
			f.del("rmd/a", "a\n", 0o644), f.del("rmd/sub/b", "b\n", 0o600), f.rmdir("rmd/sub", 0o700), f.rmdir("rmd", 0o755),
			f.delLink("oldlink", "keep.txt"),
			f.symlink("newlink", "../outside"),
			f.del("f2d", "f2d\n", 0o644), f.mkdir("f2d", 0o755), f.create("f2d/c", "c\n", 0o644),
			f.del("d2f/x", "x\n", 0o644), f.rmdir("d2f", 0o755), f.create("d2f", "d2f\n", 0o644),
			f.del("f2l", "f2l\n", 0o644), f.symlink("f2l", "keep.txt"),
			f.delLink("l2f", "nowhere"), f.create("l2f", "l2f\n", 0o644),
			f.delLink("l2d", "keepdir"), f.mkdir("l2d", 0o755), f.create("l2d/in", "in\n", 0o644),
			f.create("keepdir/added", "added\n", 0o644),
			f.mkfifo("pipe", 0o640), f.mkfifo("nd/pipe", 0o604), f.delFifo("oldpipe", 0o644),
			// Names that are not UTF-8, next to the name U+FFFD would make of them.
			f.del("v\xff", "invalid\n", 0o644), f.create("bad\xff\xfe.txt", "bad\n", 0o644),
			f.modify("m\xfe", "m\n", 0o644, "m new\n", 0o644), f.symlink("ln\xff", "t\xff"),
			f.mkdir("d\xff", 0o755), f.create("d\xff/x\xfe", "x\n", 0o644),
			// One inode at three paths: in an existing dir, in a new one.
			linked(f.create("h1", "linked\n", 0o644), 7), linked(f.create("keepdir/h2", "linked\n", 0o644), 7),
			linked(f.create("nd/h3", "linked\n", 0o644), 7),
		}
	},
	after: common.with(
		"mod.txt", reg("modified\n", 0o600).own(1234, 5678),
		"new.txt", reg("new\n", 0o4755).own(1234, 5678),
		"chm.txt", reg("chm\n", 0o600),
		"cdir", dir(0o750), "cdir/k", reg("k\n", 0o644),
		"nd", dir(0o2775).own(1234, 5678), "nd/sub", dir(0o755), "nd/sub/f", reg("f\n", 0o644),
		"nd/g", reg("g\n", 0o644), "nd/ln", sym("g"),
		"newlink", sym("../outside"),
		"f2d", dir(0o755), "f2d/c", reg("c\n", 0o644),
		"d2f", reg("d2f\n", 0o644),
		"f2l", sym("keep.txt"),
		"l2f", reg("l2f\n", 0o644),
		"l2d", dir(0o755), "l2d/in", reg("in\n", 0o644),
		"keepdir/added", reg("added\n", 0o644),
		"pipe", fifo(0o640), "nd/pipe", fifo(0o604),
		"v\ufffd", reg("replacement\n", 0o644), "bad\xff\xfe.txt", reg("bad\n", 0o644),
		"m\xfe", reg("m new\n", 0o644), "ln\xff", sym("t\xff"),
		"d\xff", dir(0o755), "d\xff/x\xfe", reg("x\n", 0o644),
		"h1", reg("linked\n", 0o644), "keepdir/h2", reg("linked\n", 0o644), "nd/h3", reg("linked\n", 0o644),
	),
}
