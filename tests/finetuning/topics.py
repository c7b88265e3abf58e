"""News topics, each a query and a paraphrase: training and eval pairs for the tests.

``TOPICS``: six, for the recipe tests; ``NEWS``: eight, for versions, the admin and evaluations.
"""

TOPICS = [
    ("central bank raises interest rates", "the bank lifted its rate to fight inflation"),
    ("football team wins the cup", "the club took the trophy after a late goal"),
    ("new phone has a better camera", "the handset ships with an improved lens"),
    ("storm closes schools", "heavy rain and wind shut classrooms across the region"),
    ("city opens a new park", "the council unveiled green space near the river"),
    ("company reports record profit", "the firm earned more than ever this quarter"),
]

NEWS = [
    ("central bank raises interest rates", "the bank lifted its rate to fight inflation"),
    ("football team wins the cup", "the club took the trophy after a late goal"),
    ("new phone has a better camera", "the handset ships with an improved lens"),
    ("storm closes schools", "heavy rain and wind shut classrooms across the region"),
    ("city opens a new library", "the town unveiled a public reading room"),
    ("scientists find water on mars", "researchers detect ice beneath the red planet"),
    ("film wins best picture", "the movie took the top award at the ceremony"),
    ("train strike delays commuters", "rail workers walk out and journeys are disrupted"),
]
