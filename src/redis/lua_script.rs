//! A floodgate Lua script: redis-rs's [`Script`] (its SHA1, for `EVALSHA`) with its source, so
//! that on a Redis Cluster a script missing on a master is loaded on that master alone, or sent
//! as `EVAL` to a master no load reaches (a call redirected by `ASK`).

use redis::{Arg, Cmd, Script};

/// A Lua script and its source. Reads as the [`Script`] it wraps.
#[derive(Debug)]
pub struct LuaScript {
    script: Script,
    source: Box<str>,
}

impl LuaScript {
    /// The script of `source`.
    pub(crate) fn new(source: &str) -> Self {
        LuaScript {
            script: Script::new(source),
            source: source.into(),
        }
    }

    /// The Lua source.
    #[cfg(test)]
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// `SCRIPT LOAD` of the source.
    pub(crate) fn load_command(&self) -> redis::Cmd {
        let mut command = redis::cmd("SCRIPT");
        command.arg("LOAD").arg(self.source.as_bytes());
        command
    }

    /// `evalsha`, an `EVALSHA` of this script, as an `EVAL` of its source with the same key
    /// count, keys and arguments: for a node that does not have the script and that no
    /// `SCRIPT LOAD` reaches (a redirected call, see `query_script`). Cold: the source is
    /// copied into the command.
    #[cold]
    pub(crate) fn eval_command(&self, evalsha: &Cmd) -> Cmd {
        // `EVALSHA` and the hash, replaced by `EVAL` and the source; an `EVALSHA` holds no
        // other kind of argument than a plain one (no cursor: `connection::evalsha` adds none).
        let rest = evalsha.args_iter().skip(2).filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        let (count, bytes) = rest
            .clone()
            .fold((0, 0), |(n, b), arg| (n + 1, b + arg.len()));
        let mut command = Cmd::with_capacity(2 + count, 4 + self.source.len() + bytes);
        command.arg("EVAL").arg(self.source.as_bytes());
        for arg in rest {
            command.arg(arg);
        }
        command
    }
}

impl std::ops::Deref for LuaScript {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_command_carries_the_source_whose_hash_the_script_has() {
        let script = LuaScript::new("return 1");
        assert_eq!(script.get_hash(), Script::new("return 1").get_hash());
        let packed = script.load_command().get_packed_command();
        let text = String::from_utf8_lossy(&packed);
        assert!(text.contains("SCRIPT") && text.contains("LOAD") && text.contains("return 1"));
    }

    #[test]
    fn the_eval_command_of_an_evalsha_carries_the_source_and_the_same_keys_and_arguments() {
        let script = LuaScript::new("return {KEYS[1], ARGV[1], ARGV[2]}");
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.get_hash())
            .arg(1)
            .arg("{a}:k")
            .arg(7_u64)
            .arg(&b"x y"[..]);
        let mut expected = redis::cmd("EVAL");
        expected
            .arg(script.source())
            .arg(1)
            .arg("{a}:k")
            .arg(7_u64)
            .arg(&b"x y"[..]);
        assert_eq!(
            script.eval_command(&evalsha).get_packed_command(),
            expected.get_packed_command()
        );
    }

    /// The names of the `local function`s `source` defines that it never calls (a call: the
    /// name followed by `(` outside comments, other than the definition).
    fn uncalled(source: &str) -> Vec<String> {
        let code: String = source
            .lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let calls = |name: &str| {
            code.match_indices(name)
                .filter(|&(at, _)| {
                    let before = code[..at].chars().next_back();
                    let after = code[at + name.len()..].trim_start();
                    let called = after.starts_with('(') || code[..at].ends_with("pcall(");
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && called
                })
                .count()
        };
        code.split("local function ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .filter(|name| calls(name) < 2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn uncalled_finds_a_function_defined_and_never_called() {
        let source = "local function f(x) return x end\nlocal function g() end -- g()\nreturn f(1)";
        assert_eq!(uncalled(source), ["g"]);
    }

    /// Each `local function` a script defines is a closure Lua builds on every call of the
    /// script (its preludes' too): none is built that the script never calls.
    #[test]
    fn no_script_defines_a_function_it_never_calls() {
        use crate::redis::{fixed_window, gcra, leased, sliding_log, sliding_window};
        let scripts: [(&str, &LuaScript); 15] = [
            ("fixed window", &fixed_window::ANCHORED),
            ("fixed window batch", &fixed_window::ANCHORED_BATCH),
            ("aligned window", &fixed_window::ALIGNED),
            ("aligned window batch", &fixed_window::ALIGNED_BATCH),
            ("gcra", &gcra::SCRIPT),
            ("gcra batch", &gcra::BATCH),
            ("gcra lease", &leased::GCRA_LEASE),
            ("gcra refund", &leased::GCRA_REFUND),
            ("window lease", &leased::WINDOW_LEASE),
            ("aligned lease", &leased::ALIGNED_LEASE),
            ("aligned refund", &leased::ALIGNED_REFUND),
            ("sliding log", &sliding_log::SCRIPT),
            ("sliding log batch", &sliding_log::BATCH),
            ("sliding window", &sliding_window::SCRIPT),
            ("sliding window batch", &sliding_window::BATCH),
        ];
        let found: Vec<(&str, Vec<String>)> = scripts
            .iter()
            .map(|&(name, script)| (name, uncalled(script.source())))
            .filter(|(_, uncalled)| !uncalled.is_empty())
            .collect();
        assert!(found.is_empty(), "defined, never called: {found:?}");
    }
}
