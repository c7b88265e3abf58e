"""Six news topics, each a query and a paraphrase: training and eval pairs for the recipe tests."""

TOPICS = [
    ("central bank raises interest rates", "the bank lifted its rate to fight inflation"),
    ("football team wins the cup", "the club took the trophy after a late goal"),
    ("new phone has a better camera", "the handset ships with an improved lens"),
    ("storm closes schools", "heavy rain and wind shut classrooms across the region"),
    ("city opens a new park", "the council unveiled green space near the river"),
    ("company reports record profit", "the firm earned more than ever this quarter"),
]
