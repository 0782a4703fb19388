package fidelity

import "time"

// workload is one realistic agent action. Each runs with /bin/sh -c in
// TREE/work of a fresh tree TREE that holds work/ (the cwd), home/ ($HOME) and
// tmp/ ($TMPDIR), all of it compared.
type workload struct {
	name string
	// tools are the commands it needs on PATH; a missing one fails the
	// workload where DRYEXEC_REQUIRE names tool (testreq) and skips it
	// otherwise.
	tools []string
	// setup makes the template tree (natively, once; not compared). Both runs
	// start from exact copies of it.
	setup string
	// run is the workload itself, natively and as a trial.
	run string
	// check runs natively after the native run and after the commit; its exit
	// code and output must be the same (make -q, git fsck, an import).
	check string
	// timeout bounds the run (natively and the trial); default 3 minutes.
	timeout time.Duration
	// nextSecond: each run starts in a later wall-clock second than the
	// template's last write. git's index compares mtimes in whole seconds:
	// a run in the template's second finds its entries "racily clean",
	// re-hashes the files and rewrites (freshens the mtime of) objects
	// that exist; a run a second later does not. Which of the two the
	// native run and the trial got depended on how fast each started.
	nextSecond bool
}

// oddTree is a shell function making a tree with the modes, links and kinds
// that archivers must carry: a 0700 directory, a 0600 and a 0444 file, an
// executable, a sticky 1777 directory, three hard links to one file across
// directories, a relative symlink, a FIFO, and fixed mtimes on everything.
const oddTree = `
odd_tree() {
	mkdir -p "$1/priv" "$1/pub/sub" "$1/sticky"
	printf 'secret\n' > "$1/priv/key"; chmod 0600 "$1/priv/key"
	printf 'read only\n' > "$1/pub/ro.txt"; chmod 0444 "$1/pub/ro.txt"
	printf '#!/bin/sh\necho run\n' > "$1/pub/run.sh"; chmod 0755 "$1/pub/run.sh"
	printf 'shared\n' > "$1/sticky/s"
	printf 'linked\n' > "$1/pub/a"; ln "$1/pub/a" "$1/pub/a-hard"; ln "$1/pub/a" "$1/pub/sub/a-hard"
	ln -s ../pub/run.sh "$1/priv/run-link"
	${NOFIFO:+:} mkfifo "$1/pub/fifo"
	find "$1" -exec touch -h -d '2025-06-01 12:00:00Z' {} +
	chmod 0700 "$1/priv"; chmod 1777 "$1/sticky"
}
`

// gitRepo makes a repository with a few commits (the dates come from the
// environment, so the hashes are the same every time).
const gitRepo = `
git_repo() {
	mkdir -p "$1" && cd "$1" && git init -q -b main
	printf 'hello\n' > README.md; mkdir src; printf 'package x\n' > src/a.go
	git add -A && git commit -q -m initial
	for i in 1 2 3 4; do printf 'line %s\n' $i >> README.md; printf 'v%s\n' $i > src/v$i.txt; git add -A; git commit -q -m "change $i"; done
	cd - >/dev/null
}
`

// goMain is the Go program the go_build workload builds; the harness warms a
// build cache with the same program elsewhere (see harness.goCache).
const goMain = "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello from go\\n\") }\n"

const cSources = `
cat > Makefile <<'EOF'
CFLAGS = -O1 -Wall
hello: main.o util.o
	$(CC) -o $@ main.o util.o
main.o: main.c util.h
util.o: util.c util.h
clean:
	rm -f hello *.o
EOF
cat > util.h <<'EOF'
int twice(int);
EOF
cat > util.c <<'EOF'
#include "util.h"
int twice(int x) { return 2 * x; }
EOF
cat > main.c <<'EOF'
#include <stdio.h>
#include "util.h"
int main(void) { printf("hello %d\n", twice(21)); return 0; }
EOF
`

var workloads = []workload{
	{name: "git_init_commit", tools: []string{"git"},
		setup: `mkdir -p src && printf 'hello\n' > README.md && printf 'package x\n' > src/a.go && printf '#!/bin/sh\n' > run.sh && chmod 755 run.sh`,
		run:   `git init -q -b main && git add -A && git commit -q -m initial && git log --format='%H %s'`,
		check: `git fsck --full --no-progress && git status --porcelain && git log --format='%H %s'`},
	{name: "git_branch_merge", tools: []string{"git"}, nextSecond: true,
		setup: gitRepo + `git_repo repo`,
		run: `cd repo && git checkout -q -b feature && printf 'feature\n' >> src/a.go && git commit -qam feature &&
git checkout -q main && printf 'main\n' > NEWS && git add NEWS && git commit -qm news &&
git merge -q --no-ff -m merge feature && git branch -d feature && git log --graph --format='%H %s'`,
		check: `cd repo && git fsck --full --no-progress && git status --porcelain && git log --format='%H %s'`},
	{name: "git_gc", tools: []string{"git"},
		setup: gitRepo + `git_repo repo`,
		run:   `cd repo && git -c pack.threads=1 gc --quiet && git count-objects -v | grep -v size`,
		check: `cd repo && git fsck --full --no-progress && git status --porcelain && git log --format='%H %s'`},
	{name: "git_clone_local", tools: []string{"git"},
		setup: gitRepo + `git_repo src`,
		// A local clone hard-links the objects across directories.
		run:   `git clone -q src dst && git -C dst log --format='%H %s'`,
		check: `git -C dst fsck --full --no-progress && git -C dst status --porcelain`},
	{name: "python_venv", tools: []string{"/usr/bin/python3"},
		run:   `/usr/bin/python3 -m venv venv && venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)'`,
		check: `venv/bin/python -c 'import sys; print(sys.prefix)' && venv/bin/pip --version | cut -d' ' -f1,2`},
	{name: "python_compileall", tools: []string{"/usr/bin/python3"},
		setup: `mkdir -p pkg/sub && printf 'A = 1\n' > pkg/__init__.py && printf 'def f():\n    return 2\n' > pkg/mod.py && printf 'B = [i for i in range(3)]\n' > pkg/sub/__init__.py`,
		run:   `/usr/bin/python3 -m compileall -q pkg && /usr/bin/python3 -c 'import pkg.mod, pkg.sub; print(pkg.mod.f(), pkg.sub.B)'`,
		// compileall says "Compiling" only for a pyc that is stale.
		check: `/usr/bin/python3 -m compileall pkg`},
	{name: "sqlite_migration", tools: []string{"/usr/bin/python3", "sqlite3"},
		setup: `/usr/bin/python3 - <<'EOF'
import sqlite3
db = sqlite3.connect("app.db")
db.executescript("""
CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO users(name) VALUES ('ada'), ('grace'), ('linus');
""")
db.commit(); db.close()
EOF`,
		run: `/usr/bin/python3 - <<'EOF'
import sqlite3
db = sqlite3.connect("app.db")
with db:
    db.execute("CREATE TABLE schema_version(v INTEGER)")
    db.execute("ALTER TABLE users ADD COLUMN email TEXT")
    db.execute("UPDATE users SET email = name || '@example.invalid'")
    db.execute("CREATE INDEX users_email ON users(email)")
    db.execute("INSERT INTO schema_version VALUES (2)")
print(db.execute("SELECT count(*), max(email) FROM users").fetchone())
db.close()
EOF
sqlite3 app.db 'PRAGMA integrity_check'`,
		check: `sqlite3 app.db .dump`},
	{name: "pip_install_local", tools: []string{"/usr/bin/python3"},
		// The venv and the wheel package (from Debian's python3-wheel-whl)
		// are made ahead: pip builds the package directory offline with them.
		setup: `/usr/bin/python3 -m venv venv && venv/bin/pip install -q --no-index --find-links /usr/share/python-wheels wheel &&
mkdir -p tinypkg/tinypkg && printf 'VALUE = 42\n' > tinypkg/tinypkg/__init__.py &&
printf '[build-system]\nrequires = ["setuptools", "wheel"]\nbuild-backend = "setuptools.build_meta"\n\n[project]\nname = "tinypkg"\nversion = "1.0"\n' > tinypkg/pyproject.toml`,
		run:   `venv/bin/pip install -q --no-index --no-build-isolation --no-cache-dir ./tinypkg && venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'`,
		check: `venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)' && venv/bin/pip show -f tinypkg | grep -v Location`},
	{name: "npm_install_tarball", tools: []string{"npm", "node"},
		setup: `mkdir -p tinylib app &&
printf '{"name":"tinylib","version":"1.0.0","main":"index.js","bin":{"tinylib":"cli.js"}}\n' > tinylib/package.json &&
printf 'exports.hi = () => "hi from tinylib";\n' > tinylib/index.js &&
printf '#!/usr/bin/env node\nconsole.log(require("./index.js").hi());\n' > tinylib/cli.js && chmod 755 tinylib/cli.js &&
printf '{"name":"app","version":"0.1.0","private":true}\n' > app/package.json &&
(cd tinylib && npm pack -q --pack-destination .. >/dev/null)`,
		run:   `cd app && npm install --offline --no-audit --no-fund ../tinylib-1.0.0.tgz && node -e 'console.log(require("tinylib").hi())' && ./node_modules/.bin/tinylib`,
		check: `cd app && node -e 'console.log(require("tinylib").hi())' && npm ls --offline`},
	{name: "node_fs_rename", tools: []string{"node"},
		setup: `mkdir -p a/sub b c && printf 'x\n' > a/x.txt && printf 'y\n' > a/y.txt && printf 'old y\n' > c/y.txt && printf 's\n' > a/sub/s.txt`,
		run: `node -e '
const fs = require("fs");
fs.renameSync("a/x.txt", "b/x.txt");        // a host file, across directories
fs.renameSync("a/y.txt", "c/y.txt");        // over a host file in another directory
fs.renameSync("a/sub", "b/sub");            // a host directory
fs.linkSync("b/x.txt", "c/x-link");         // a hard link across directories
fs.writeFileSync("a/new.txt", "new\n");
fs.renameSync("a/new.txt", "c/new.txt");    // a new file, across directories
console.log(fs.readdirSync("b").sort(), fs.readdirSync("c").sort());
'`},
	{name: "c_make", tools: []string{"make", "cc"},
		setup: cSources,
		run:   `make && ./hello`,
		check: `make -q; echo "make -q: $?"; ./hello`},
	{name: "c_make_incremental", tools: []string{"make", "cc"},
		setup: cSources + `make >/dev/null`,
		// util.h is newer than everything after the touch: all rebuilt.
		run:   `touch util.h && make && ./hello`,
		check: `make -q; echo "make -q: $?"; ./hello`},
	{name: "go_build", tools: []string{"go"},
		// Telemetry off: its counter files are named after the day, and it
		// picks a random weekday to upload on.
		setup: `go telemetry off && mkdir -p "$HOME/.cache" && cp -a "$FIDELITY_GOCACHE" "$HOME/.cache/go-build" && mkdir hello && cd hello &&
printf 'module example.com/hello\n\ngo 1.22\n' > go.mod && cat > main.go <<'EOF'
` + goMain + `EOF`,
		run:   `cd hello && go build -o app . && ./app`,
		check: `cd hello && ./app`},
	{name: "tar_extract", tools: []string{"tar"},
		setup: oddTree + `odd_tree src && tar -cf bundle.tar src && chmod -R u+rwx src && rm -rf src`,
		run:   `mkdir out && tar -xpf bundle.tar -C out && find out | sort`},
	{name: "tar_create", tools: []string{"tar", "gzip"},
		setup: oddTree + `odd_tree src`,
		run: `tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' -cf out.tar src &&
gzip -n -k out.tar && tar -tvf out.tar.gz`},
	{name: "unzip_extract", tools: []string{"zip", "unzip"},
		setup: `NOFIFO=1` + oddTree + `odd_tree src && zip -q -r -X -y bundle.zip src && chmod -R u+rwx src && rm -rf src`,
		run:   `unzip -q bundle.zip -d out && find out | sort`},
	{name: "rsync_hardlinks", tools: []string{"rsync"},
		setup: oddTree + `odd_tree src`,
		run:   `rsync -aH src/ dst/ && find dst | sort`},
	{name: "sed_inplace", tools: []string{"sed"},
		setup: `printf 'foo one\nfoo two\n' > a.txt && printf 'nothing here\n' > b.txt && printf 'key=foo\n' > c.conf && chmod 600 c.conf && mkdir d && printf 'foo\n' > d/e.txt && chmod 755 d/e.txt`,
		// b.txt has no match: sed rewrites it anyway (same bytes, new mtime).
		run: `sed -i 's/foo/bar/g' a.txt b.txt c.conf d/e.txt && cat a.txt c.conf d/e.txt`},
	{name: "find_delete", tools: []string{"find"},
		setup: `mkdir -p build/obj/deep empty/a/b keep && touch build/a.o build/obj/b.o build/obj/deep/c.o keep/x.c keep/x.o && printf t > keep/t.tmp`,
		run:   `find . -name '*.o' -delete && find . -type d -empty -delete && find . -name '*.tmp' -print -delete && find . | sort`},
	{name: "chmod_recursive", tools: []string{"chmod"},
		setup: `mkdir -p private/deep public/docs shared && printf k > private/key && printf d > private/deep/d && printf r > public/readme && printf i > public/docs/i && chmod 600 public/docs/i`,
		run:   `chmod -R go-rwx private && chmod -R a+rX public && chmod 1777 shared && chmod 0444 public/readme && chmod 0711 public/docs`},
	{name: "mv_host_dirs", tools: []string{"mv"},
		setup: `mkdir -p proj/src/lib proj/docs archive old/deep && printf 'x\n' > proj/src/lib/x.c && printf 'd\n' > proj/docs/index.md && printf 'o\n' > old/deep/o && ln -s lib/x.c proj/src/x-link`,
		run:   `mv proj/src proj/source && mv proj/docs archive/ && mv old new && find . | sort`},
	{name: "python_rename_host_dir", tools: []string{"/usr/bin/python3"},
		setup: `mkdir -p proj/build/sub proj/src dst && printf 'b\n' > proj/build/sub/b.o && printf 's\n' > proj/src/s.py`,
		// A raw rename(2), which has no copy fallback as mv has.
		run: `/usr/bin/python3 -c '
import os
os.rename("proj/build", "proj/build.old")
os.rename("proj/src", "dst/src")
print(sorted(os.listdir("proj")), sorted(os.listdir("dst")))'`},
	{name: "type_swaps", tools: []string{"ln"},
		setup: `printf f1 > f1 && mkdir -p d1/in && printf x > d1/in/x && printf f2 > f2 && ln -s f2 l1 && mkdir d2 && printf y > d2/y && mkdir d3 && ln -s d3 l2`,
		run: `rm f1 && mkdir f1 && printf x > f1/x &&
rm -r d1 && printf 'now a file\n' > d1 &&
rm l1 && printf 'now real\n' > l1 &&
rm f2 && ln -s d1 f2 &&
rm -r d2 && ln -s f1 d2 &&
rm l2 && mkdir l2 && find . | sort`},
	{name: "big_file", tools: []string{"yes", "head", "sha256sum"},
		setup: `printf 'small\n' > small`,
		run:   `yes 'fidelity: fifty megabytes of this line' | head -c 52428800 > big.bin && sha256sum big.bin`},
	{name: "fifo", tools: []string{"mkfifo"},
		setup: `mkfifo old.fifo && mkdir q`,
		run:   `mkfifo pipe1 && mkfifo -m 0600 q/pipe2 && rm old.fifo && stat -c '%A %n' pipe1 q/pipe2`},
	{name: "python_cross_dir", tools: []string{"/usr/bin/python3"},
		setup: `mkdir -p a b c && printf 'x\n' > a/x.txt && printf 'y\n' > a/y.txt && printf 'old\n' > c/y.txt`,
		run: `/usr/bin/python3 -c '
import os
os.rename("a/x.txt", "b/x.txt")       # across directories
os.link("b/x.txt", "c/x.hard")        # a hard link across directories
os.replace("a/y.txt", "c/y.txt")      # over a file in another directory
with open("a/n.txt", "w") as f: f.write("n\n")
os.rename("a/n.txt", "b/n.txt")
print(sorted(os.listdir("a")), sorted(os.listdir("b")), sorted(os.listdir("c")), os.stat("c/x.hard").st_nlink)'`},
	{name: "hard_links", tools: []string{"ln", "cp"},
		setup: `mkdir -p tree/sub && printf 'a\n' > tree/a && printf 'b\n' > tree/sub/b`,
		// cp -al: a hard-linked copy of a tree (as rsnapshot makes), and a
		// new file linked into an existing directory.
		run: `cp -al tree snap && printf 'new\n' > n1 && ln n1 tree/sub/n2 && ln n1 n3 && stat -c '%h %n' tree/a snap/a n1`},
	{name: "non_utf8_names", tools: []string{"/usr/bin/python3"},
		setup: `/usr/bin/python3 -c '
import os
os.mkdir(b"d\xfcr")
open(b"old-\xff.txt", "w").write("latin\n")'`,
		run: `/usr/bin/python3 -c '
import os
open(b"caf\xe9.txt", "w").write("cafe\n")
os.mkdir(b"dir-\xe9")
open(b"dir-\xe9/inner", "w").write("i\n")
os.rename(b"old-\xff.txt", b"d\xfcr/\xff-moved")
os.symlink(b"caf\xe9.txt", b"link-\xe9")
print(sorted(os.listdir(b".")), os.listdir(b"d\xfcr"))'`},
}
