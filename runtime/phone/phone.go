package phone

import (
	"embed"
	"io/fs"
)

//go:embed index.js
var files embed.FS

// Entrypoint is the file Acurast's NodeJSWithBundle runtime starts.
const Entrypoint = "index.js"

// Files is the set of on-phone files (without config.json, which the bundle builder writes).
func Files() fs.FS { return files }
