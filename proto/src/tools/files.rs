//! The workspace file tools (they run in the worker, through its jail).

use serde_json::{Value, json};

use super::{
    Actions, RunsIn, SchemaSettings, Subject, ToolDef, by_path, checked_by_executor, object, text,
    to_wire, truncate, writes_path,
};

pub const CREATE_FILE: &str = "create_file";
pub const STR_REPLACE: &str = "str_replace";
pub const VIEW: &str = "view";
pub const FILE_READ: &str = "file.read";
pub const FILE_WRITE: &str = "file.write";
pub const FILE_CREATE: &str = "file.create";
pub const FILE_DELETE: &str = "file.delete";
pub const FILE_PATCH: &str = "file.patch";
pub const FILE_LIST: &str = "file.list";
pub const FILE_SEARCH: &str = "file.search";

const PATH: &str = "File path relative to the workspace root";

fn path() -> Value {
    json!({"type": "string", "description": PATH})
}

fn content() -> Value {
    json!({"type": "string", "description": "The complete content of the file"})
}

fn path_and_content(_: &SchemaSettings) -> Value {
    object(
        json!({"path": path(), "content": content()}),
        &["path", "content"],
    )
}

fn paging(_: &SchemaSettings) -> Value {
    object(
        json!({
            "path": path(),
            "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1 = first line)"},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show"}
        }),
        &["path"],
    )
}

fn replacement(_: &SchemaSettings) -> Value {
    object(
        json!({
            "path": path(),
            "old_str": {"type": "string", "description": "The exact text to replace; it must occur exactly once in the file, whitespace included"},
            "new_str": {"type": "string", "description": "The text to put in its place (may be empty to delete old_str)"}
        }),
        &["path", "old_str", "new_str"],
    )
}

const fn file_tool(
    name: &'static str,
    description: fn(&SchemaSettings) -> String,
    parameters: fn(&SchemaSettings) -> Value,
    subject: fn(&Value) -> Subject,
    typical_call: &'static str,
) -> ToolDef {
    ToolDef {
        name,
        aliases: &[],
        action_name: name,
        runs_in: RunsIn::Worker,
        description,
        parameters,
        subject,
        typical_call,
        check_args: checked_by_executor,
    }
}

pub(super) const CREATE_FILE_TOOL: ToolDef = file_tool(
    CREATE_FILE,
    |_| {
        "Create a file in the workspace, or replace its whole content. \
         Parent directories are created. Paths are relative to the workspace root."
            .into()
    },
    path_and_content,
    writes_path,
    r#"{"path":"notes.md","content":""}"#,
);

const REPLACE_DESCRIPTION: &str = "exactly once (whitespace and indentation included); if it \
     occurs 0 or several times the file is left unchanged and the count is reported, so add \
     surrounding lines to make it unique. Returns the edited lines with line numbers.";

pub(super) const STR_REPLACE_TOOL: ToolDef = file_tool(
    STR_REPLACE,
    |_| {
        format!(
            "Replace one exact piece of text in a workspace file. old_str must occur {REPLACE_DESCRIPTION}"
        )
    },
    replacement,
    writes_path,
    r#"{"path":"src/main.rs","old_str":"a","new_str":"b"}"#,
);

pub(super) const VIEW_TOOL: ToolDef = file_tool(
    VIEW,
    |_| {
        "Show a text file of the workspace with numbered lines. \
         Use offset and limit to page through long files."
            .into()
    },
    paging,
    by_path,
    r#"{"path":"README.md"}"#,
);

pub(super) const FILE_READ_TOOL: ToolDef = file_tool(
    FILE_READ,
    |_| {
        "Read a text file of the workspace, shown with numbered lines. \
         Use offset and limit to page through long files. Binary files are refused."
            .into()
    },
    paging,
    by_path,
    r#"{"path":"README.md"}"#,
);

pub(super) const FILE_WRITE_TOOL: ToolDef = file_tool(
    FILE_WRITE,
    |_| {
        format!(
            "Replace the whole content of an existing workspace file. Fails if the file \
             does not exist (use {} for new files).",
            to_wire(FILE_CREATE)
        )
    },
    path_and_content,
    writes_path,
    r#"{"path":"notes.md","content":""}"#,
);

pub(super) const FILE_CREATE_TOOL: ToolDef = file_tool(
    FILE_CREATE,
    |_| {
        format!(
            "Create a new file in the workspace (parent directories are created). Fails if \
             something already exists at the path (use {} or {} to change it).",
            to_wire(FILE_WRITE),
            to_wire(FILE_PATCH)
        )
    },
    path_and_content,
    writes_path,
    r#"{"path":"notes.md","content":""}"#,
);

pub(super) const FILE_DELETE_TOOL: ToolDef = file_tool(
    FILE_DELETE,
    |_| {
        "Delete a file of the workspace. Directories are not deleted; a symlink is deleted \
         itself, never what it points to."
            .into()
    },
    |_| object(json!({"path": path()}), &["path"]),
    writes_path,
    r#"{"path":"notes.md"}"#,
);

pub(super) const FILE_PATCH_TOOL: ToolDef = file_tool(
    FILE_PATCH,
    |_| {
        format!(
            "Replace one exact piece of text in an existing workspace file. old_str must occur {REPLACE_DESCRIPTION}"
        )
    },
    replacement,
    writes_path,
    r#"{"path":"src/main.rs","old_str":"a","new_str":"b"}"#,
);

/// The directory a lister or searcher looks in: the root when none is named.
fn place(args: &Value) -> &str {
    text(args, "path").filter(|p| !p.is_empty()).unwrap_or(".")
}

pub(super) const FILE_LIST_TOOL: ToolDef = file_tool(
    FILE_LIST,
    |_| {
        "List the entries of a workspace directory, sorted, directories ending in '/', \
         symlinks shown as 'name -> target'. .git/ is skipped; long listings stop at 1000 \
         entries with a note."
            .into()
    },
    |_| {
        object(
            json!({
                "path": {"type": "string", "description": "Directory relative to the workspace root; the root when omitted"},
                "recursive": {"type": "boolean", "description": "Include everything below the directory, not just its direct entries (default false)"}
            }),
            &[],
        )
    },
    |args| Subject {
        actions: Actions::Detail(place(args).into()),
        shown: Some(truncate(text(args, "path").unwrap_or("."), 120)),
        writes: None,
    },
    r#"{"path":"src"}"#,
);

pub(super) const FILE_SEARCH_TOOL: ToolDef = file_tool(
    FILE_SEARCH,
    |_| {
        "Search the text files below a workspace directory (or one file) for a regular \
         expression (Rust regex syntax), line by line. Results are 'path:line: text'. \
         Binary files and .git/ are skipped; at most 200 matches are returned."
            .into()
    },
    |_| {
        object(
            json!({
                "pattern": {"type": "string", "description": "Regular expression, e.g. 'fn \\w+_test' or '(?i)todo'"},
                "path": {"type": "string", "description": "Directory or file to search, relative to the workspace root; the root when omitted"}
            }),
            &["pattern"],
        )
    },
    |args| Subject {
        actions: Actions::Detail(place(args).into()),
        shown: text(args, "pattern").map(|pattern| {
            let place = text(args, "path").unwrap_or(".");
            format!("{} in {}", truncate(pattern, 60), truncate(place, 60))
        }),
        writes: None,
    },
    r#"{"pattern":"fn main","path":"src"}"#,
);
