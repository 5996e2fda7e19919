//! What tasks cost: the line ending a result, the ledger and its summary, `opencode_usage`.

use super::{App, Reply};
use crate::structured;
use bridge_render as render;

impl App {
    /// The line that ends a finished task's result: cost, Claude-equivalent, saved.
    pub fn usage_line(&self, s: &run_supervisor::TaskSnapshot) -> String {
        if !s.state.is_finished() {
            return String::new();
        }
        // The Claude-equivalent at the compare model's price now, as the header names it.
        let pricing = &self.supervisor.config().pricing;
        let usage = s.usage.clone().map(|mut u| {
            u.claude_equivalent = pricing.compare_price().map(|p| p.cost(&u.tokens));
            u
        });
        render::usage::usage_line(usage.as_ref(), s.model.as_deref(), pricing.compare_model())
    }

    /// The usage ledger (empty without a state directory).
    pub fn usage_ledger(&self) -> Result<run_supervisor::usage::ledger::Ledger, String> {
        match self.supervisor.state_dir() {
            None => Ok(Default::default()),
            Some(dir) => run_supervisor::usage::ledger::read(dir)
                .map_err(|e| render::usage::ledger_unreadable(dir, &e.to_string())),
        }
    }

    /// The ledger's summary of `window`.
    pub fn usage_summary(
        &self,
        window: &run_supervisor::usage::ledger::Window,
    ) -> Result<run_supervisor::usage::ledger::Summary, String> {
        use run_supervisor::usage::ledger;
        let l = self.usage_ledger()?;
        Ok(ledger::summarize_window(
            l.rows.iter().map(ledger::Row::view),
            l.unreadable,
            window,
            self.supervisor.config().pricing.compare_price(),
        ))
    }

    /// `opencode_usage`: the ledger is read once, without copying its strings, for the summary
    /// and the budgets.
    pub(super) async fn usage(
        &self,
        window: &run_supervisor::usage::ledger::Window,
        since_text: &str,
        by: Option<&str>,
    ) -> Result<Reply, String> {
        use run_supervisor::usage::ledger;
        let text = match self.supervisor.state_dir() {
            None => Vec::new(),
            Some(dir) => ledger::read_text(dir)
                .map_err(|e| render::usage::ledger_unreadable(dir, &e.to_string()))?,
        };
        let (rows, unreadable) = ledger::parse_text(&text);
        let rows: Vec<_> = rows.iter().map(ledger::TextRow::view).collect();
        let pricing = &self.supervisor.config().pricing;
        let summary = ledger::summarize_window(
            rows.iter().copied(),
            unreadable,
            window,
            pricing.compare_price(),
        );
        let compare = &self.supervisor.config().pricing.compare_model();
        let (standings, today) = self.supervisor.budget_report_of(&rows, None);
        let view = structured::UsageView::new(&summary, compare, &standings, today);
        Ok(Reply {
            text: render::usage::usage_report_by(&summary, since_text, compare, by)
                + &render::usage::budget_lines(&standings, today)
                + &render::usage::prices_line(&self.supervisor.config().pricing),
            structured: Some(structured::to_value(&view)),
            session: None,
        })
    }
}
