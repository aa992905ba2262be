//! The terminal, taken and given back: raw mode, the alternate screen and
//! a hidden cursor while `top` runs, and everything as it was after, on
//! every way out. [`Screen::take`] installs a panic hook that restores
//! before the panic is printed (so the message lands on the user's own
//! screen, in cooked mode); dropping the [`Screen`] restores on `q`, an
//! error, or a signal the runtime caught. Restoring twice is harmless:
//! the second time finds nothing to undo.

use std::io::{self, IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

use crate::error::TopError;

/// Whether the terminal is taken now: what a restore has to undo.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Whether the panic hook is installed (once per process).
static HOOKED: AtomicBool = AtomicBool::new(false);

/// The terminal while `top` holds it.
pub struct Screen {
    /// The terminal drawn on.
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    /// Takes the terminal: raw mode (crossterm keeps the settings it found,
    /// which the restore puts back as they were), the alternate screen.
    pub fn take() -> Result<Screen, TopError> {
        if !io::stdout().is_terminal() {
            return Err(TopError::NotATerminal);
        }
        if !HOOKED.swap(true, Ordering::SeqCst) {
            let before = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                before(info);
            }));
        }
        enable_raw_mode()?;
        TAKEN.store(true, Ordering::SeqCst);
        let taken = execute!(io::stdout(), EnterAlternateScreen)
            .and_then(|()| Terminal::new(CrosstermBackend::new(io::stdout())));
        match taken {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                restore();
                Err(e.into())
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back as it was: the cursor shown, the alternate
/// screen left (the shell's screen and its scrollback come back), the
/// terminal's settings as they were before raw mode. Does nothing when
/// the terminal is not taken; errors are ignored (there is no better
/// place left to report them).
pub fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = execute!(io::stdout(), Show, LeaveAlternateScreen);
        let _ = disable_raw_mode();
    }
}
