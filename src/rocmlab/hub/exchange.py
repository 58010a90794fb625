"""nbgrader's collect step, made to refuse submissions filed under another user's name.

The exchange's inbound folder is writable by every user, so a learner can file a submission
under a classmate's name (``<student>+<lab>+<timestamp>+<random>``). nbgrader 0.9's ``check_owner``
only logs a warning and collects it anyway, the newest per name winning. ``OwnerCheckedCollect``
(set as ``ExchangeFactory.collect`` by nbgrader_config.py) collects, for each student, the newest
submission that the student's own Unix account owns, and skips the others with a warning. With
``check_owner`` off (the demo hub, where one Unix user owns everything) it is nbgrader's collect.
"""

import os
import pwd

from nbgrader.exchange.default.collect import ExchangeCollect


class OwnerCheckedCollect(ExchangeCollect):
    def owned_by_student(self, record: dict) -> bool:
        try:
            uid = os.stat(os.path.join(self.inbound_path, record["filename"]), follow_symlinks=False).st_uid
            return pwd.getpwuid(uid).pw_name == record["username"]
        except (OSError, KeyError):
            return False

    def _sort_by_timestamp(self, records):
        newest_first = super()._sort_by_timestamp(records)
        if not self.check_owner:
            return newest_first
        for record in newest_first:
            if not self.owned_by_student(record):
                self.log.warning(
                    "not collected: %s is filed under %s but not owned by that user",
                    record["filename"],
                    record["username"],
                )
        return sorted(newest_first, key=lambda record: not self.owned_by_student(record))  # stable: owned first

    def copy_files(self):
        if self.check_owner:  # a student with no submission of their own (each was named above)
            self.src_records = [record for record in self.src_records if self.owned_by_student(record)]
        super().copy_files()
