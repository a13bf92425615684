//! A floodgate Lua script: redis-rs's [`Script`] (its SHA1, for `EVALSHA`) with its source, so
//! that on a Redis Cluster a script missing on a master is loaded on that master alone.

use redis::Script;

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

    /// `SCRIPT LOAD` of the source.
    pub(crate) fn load_command(&self) -> redis::Cmd {
        let mut command = redis::cmd("SCRIPT");
        command.arg("LOAD").arg(self.source.as_bytes());
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
}
