"""Who may do what: the chart's RBAC and the ValidatingAdmissionPolicy."""
