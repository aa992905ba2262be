//! Keys as the model knows them: a few named keys and characters, mapped
//! once from the terminal's key events ([`Key::from_event`]), so that the
//! model's rules are tested with plain values and no terminal.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// A key the model reacts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character (with Shift folded in: `G`, `P`).
    Char(char),
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Arrow up.
    Up,
    /// Arrow down.
    Down,
    /// Arrow left.
    Left,
    /// Arrow right.
    Right,
    /// Page up.
    PageUp,
    /// Page down.
    PageDown,
    /// Home.
    Home,
    /// End.
    End,
    /// Ctrl-C (in raw mode the terminal sends it as a key, not SIGINT):
    /// quits from anywhere, a question or a search included.
    Interrupt,
}

impl Key {
    /// The key a terminal event is, `None` for a release, a repeat of a
    /// modifier alone, or a key the model has no use for.
    pub fn from_event(e: &KeyEvent) -> Option<Key> {
        if e.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = e.modifiers.contains(KeyModifiers::CONTROL);
        Some(match e.code {
            KeyCode::Char('c' | 'C') if ctrl => Key::Interrupt,
            KeyCode::Char(_) if ctrl => return None,
            KeyCode::Char(c) => Key::Char(c),
            KeyCode::Enter => Key::Enter,
            KeyCode::Esc => Key::Esc,
            KeyCode::Backspace => Key::Backspace,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            KeyCode::Left => Key::Left,
            KeyCode::Right => Key::Right,
            KeyCode::PageUp => Key::PageUp,
            KeyCode::PageDown => Key::PageDown,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_c_is_the_interrupt_and_other_chords_are_ignored() {
        let ev = |code, m| KeyEvent::new(code, m);
        assert_eq!(
            Key::from_event(&ev(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Key::Interrupt)
        );
        assert_eq!(Key::from_event(&ev(KeyCode::Char('x'), KeyModifiers::CONTROL)), None);
        assert_eq!(
            Key::from_event(&ev(KeyCode::Char('P'), KeyModifiers::SHIFT)),
            Some(Key::Char('P'))
        );
        assert_eq!(Key::from_event(&ev(KeyCode::Enter, KeyModifiers::NONE)), Some(Key::Enter));
    }
}
