"""Telling people things: scheduled reports and alerts, by e-mail (SMTP) and webhook.

Figures come from the query layer the dashboard uses; what was sent is kept in a ledger under the
Tally home, so nothing is sent twice for the same period or incident (docs/REPORTS-AND-ALERTS.md).
"""
